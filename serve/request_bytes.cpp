#include "request_bytes.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>

#include "log.h"

namespace pt2serve {
namespace {

// past the bound a connection is closed only when it holds at least this much: small requests (health probes,
// metadata) go on while the bound is reached, and closing them would free next to nothing
constexpr size_t kClosableFrom = 64 * 1024;

ino_t socket_inode(size_t fd) {
  struct stat st {};
  return fstat(static_cast<int>(fd), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

void RequestBytes::received(const void* connection, int fd, size_t n) {
  if (fd < 0) return;
  const auto at = static_cast<size_t>(fd);
  if (at >= receiving_.size()) receiving_.resize(at + 1);
  Receiving& c = receiving_[at];
  // a new connection on this descriptor: libevent may give it the address of a bufferevent freed just before
  // (the socket's inode tells them apart), and its bytes then counted as the closed one's, or not at all
  const ino_t socket = socket_inode(at);
  if (c.connection != connection || c.socket != socket) {
    forget(c);
    c = Receiving{connection, socket};
  }
  if (c.closed) return;
  c.held += n;
  receiving_bytes_ += n;
  if (receiving_bytes_ + queued_.load(std::memory_order_relaxed) > limit_) over_bound();
}

void RequestBytes::received_whole(const void* connection, int fd) {
  if (fd >= 0 && static_cast<size_t>(fd) < receiving_.size() && receiving_[fd].connection == connection) {
    forget(receiving_[fd]);
  }
}

void RequestBytes::forget(Receiving& c) {
  receiving_bytes_ -= c.held;
  c.held = 0;
}

// Past the bound: what connections closed since (by their clients or a timeout) left counted is dropped; then,
// while still past it, the connection that has sent the most (at least kClosableFrom) is closed, unanswered.
void RequestBytes::over_bound() {
  for (size_t fd = 0; fd < receiving_.size(); ++fd) {
    Receiving& c = receiving_[fd];
    if ((c.held > 0 || c.closed) && socket_inode(fd) != c.socket) {
      forget(c);
      c = Receiving{};
    }
  }
  while (receiving_bytes_ + queued_.load(std::memory_order_relaxed) > limit_) {
    auto largest = std::max_element(receiving_.begin(), receiving_.end(),
                                    [](const Receiving& a, const Receiving& b) { return a.held < b.held; });
    if (largest == receiving_.end() || largest->held < kClosableFrom) return;  // the rest: bodies with workers
    const auto fd = static_cast<int>(largest - receiving_.begin());
    const auto now = std::chrono::steady_clock::now();
    if (now - last_warning_ > std::chrono::seconds(10)) {
      last_warning_ = now;
      log("warning", "closing a connection: the request bytes held would pass --max-buffered-mb",
          {{"connection_bytes", std::to_string(largest->held)}, {"limit_bytes", std::to_string(limit_)}});
    }
    ::shutdown(fd, SHUT_RDWR);  // libevent sees the end of the stream and frees the connection
    forget(*largest);
    largest->closed = true;
  }
}

}  // namespace pt2serve
