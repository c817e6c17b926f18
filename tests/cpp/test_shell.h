#pragma once
// Commands the tests start: `/bin/sh -c COMMAND` through posix_spawn.
//
// Under qemu-user (scripts/test-x86-hosts.sh) the fork of a process with running threads now and then leaves the
// child blocked on a lock before it reaches exec (qemu 7.2; seen once in ~20 runs, the shard then hung until
// killed). That is the emulator's, not the command's: a child that has not exec'd within kExecDeadline is killed
// and started again, at most kSpawnTries times. Whether it exec'd is read from a close-on-exec pipe.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>

extern char** environ;

namespace test_shell {

inline constexpr std::chrono::seconds kExecDeadline{60};
inline constexpr int kSpawnTries = 3;

struct Fd {
  int fd = -1;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// True once the child has exec'd (the pipe's write end, close-on-exec, is gone from it); false after the deadline.
inline bool wait_for_exec(int read_end) {
  const auto deadline = std::chrono::steady_clock::now() + kExecDeadline;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{read_end, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0;  // a poll error: do not retry forever
    char c;
    if (::read(read_end, &c, 1) <= 0) return true;  // EOF: exec'd (or exited)
  }
}

// Starts `/bin/sh -c command`, its stdout to a pipe when `out` is given, and returns its wait status
// (-1 when it could not be started). Appends the command's stdout to *out.
inline int run(const std::string& command, std::string* out = nullptr) {
  for (int attempt = 1; attempt <= kSpawnTries; ++attempt) {
    std::array<int, 2> exec_pipe{};
    std::array<int, 2> out_pipe{-1, -1};
    if (::pipe2(exec_pipe.data(), O_CLOEXEC) != 0) return -1;
    Fd exec_read{exec_pipe[0]}, exec_write{exec_pipe[1]};
    Fd out_read, out_write;
    if (out != nullptr) {
      if (::pipe2(out_pipe.data(), O_CLOEXEC) != 0) return -1;
      out_read.fd = out_pipe[0];
      out_write.fd = out_pipe[1];
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (out != nullptr) posix_spawn_file_actions_adddup2(&actions, out_write.fd, STDOUT_FILENO);  // dup2 clears CLOEXEC
    const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return -1;
    exec_write.reset();
    out_write.reset();
    if (!wait_for_exec(exec_read.fd)) {
      std::fprintf(stderr, "test_shell: the child for '%s' did not exec within %llds (try %d of %d); killed\n",
                   command.c_str(), static_cast<long long>(kExecDeadline.count()), attempt, kSpawnTries);
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      continue;
    }
    if (out != nullptr) {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(out_read.fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out->append(buf, static_cast<size_t>(n));
      }
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) return -1;
    }
    return status;
  }
  return -1;
}

// The exit code of `/bin/sh -c command`; -1 when it did not exit (a signal) or could not be started.
inline int exit_code(const std::string& command) {
  const int status = run(command);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// stdout of `/bin/sh -c command`, whatever its exit.
inline std::string output(const std::string& command) {
  std::string out;
  run(command, &out);
  return out;
}

}  // namespace test_shell
