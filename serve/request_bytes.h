// The bound on the request bytes pt2serve's HTTP front holds at once (HttpOptions::max_buffered_bytes): what each
// connection has sent since its last request was taken, and the bodies taken until they are released. Past it the
// connection that has sent the most is closed. docs/serving.md "Limits and attacks".
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <vector>

namespace pt2serve {

class RequestBytes {
 public:
  explicit RequestBytes(size_t limit) : limit_(limit) {}

  // Loop thread. `connection` names a connection (its buffer's address), `fd` its socket.
  // n more bytes arrived; past the bound, connections are closed (the largest first, never one under 64 KB).
  void received(const void* connection, int fd, size_t n);
  // Its request is complete: what it sent no longer counts as being received (its body, taken, is queued).
  void received_whole(const void* connection, int fd);

  // Any thread: a request body taken off its connection, counted until released.
  void queue(size_t n) { queued_.fetch_add(n, std::memory_order_relaxed); }
  void release(size_t n) { queued_.fetch_sub(n, std::memory_order_relaxed); }

 private:
  struct Receiving {
    const void* connection = nullptr;
    ino_t socket = 0;  // the socket's inode: a descriptor closed and reused holds another
    size_t held = 0;
    bool closed = false;  // closed for memory: what it still sends does not count
  };
  void forget(Receiving& c);
  void over_bound();

  size_t limit_;
  std::vector<Receiving> receiving_;  // by file descriptor; loop thread only
  size_t receiving_bytes_ = 0;
  std::atomic<size_t> queued_{0};
  std::chrono::steady_clock::time_point last_warning_{};
};

}  // namespace pt2serve
