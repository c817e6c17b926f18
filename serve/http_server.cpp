#include "http_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <unordered_set>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <openssl/ssl.h>

#include "log.h"
#include "request_bytes.h"
#include "tls.h"

namespace pt2serve {
namespace {

// a request's line and headers together, at most: a client that sends more is answered 400 and closed
constexpr size_t kMaxHeaderBytes = 64 * 1024;
// bytes written to a connection per loop iteration, at most
constexpr size_t kMaxSingleWrite = size_t{4} << 20;

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 413: return "Payload Too Large";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error";
  }
}

// The server's own answers (a stop, no memory): a fixed message, no JSON library needed.
HttpResponse error_response(int status, const char* message) {
  HttpResponse r;
  r.status = status;
  r.body = std::string("{\"error\":\"") + message + "\"}";
  return r;
}

std::string header(evkeyvalq* headers, const char* name, bool* found = nullptr) {
  const char* v = evhttp_find_header(headers, name);
  if (found) *found = v != nullptr;
  return v ? v : "";
}

std::vector<std::string> split_path(const char* path) {
  std::vector<std::string> segments;
  if (!path || *path != '/') return segments;
  std::string_view rest(path + 1);
  while (true) {
    const size_t slash = rest.find('/');
    const std::string raw(rest.substr(0, slash));
    size_t n = 0;
    char* decoded = evhttp_uridecode(raw.c_str(), 0, &n);
    segments.emplace_back(decoded ? std::string(decoded, n) : raw);
    free(decoded);
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return segments;
}

}  // namespace

struct HttpServer::Impl {
  Impl(HttpHandler& handler, HttpOptions options) : options(std::move(options)), handler(handler) {}

  HttpOptions options;
  HttpHandler& handler;
  event_base* base = nullptr;
  evhttp* http = nullptr;
  evhttp_bound_socket* bound = nullptr;
  event* wake = nullptr;          // workers' answers are ready
  event* stop_event = nullptr;    // stop() was called
  event* accept_retry = nullptr;  // accepting paused (out of file descriptors)
  SSL_CTX* ssl = nullptr;
  int port = -1;
  bool stopping = false;  // loop thread only
  size_t in_flight = 0;   // loop thread only: requests handed to workers or deferred, not yet answered
  RequestBytes bytes{options.max_buffered_bytes};  // HttpOptions::max_buffered_bytes
  std::unordered_set<evhttp_connection*> unsent;  // loop thread only: connections writing an answer
  std::chrono::steady_clock::time_point last_accept_warning{};

  // Requests for the workers, answers for the loop. The worker idle for the shortest time takes the next request
  // (a stack, not a queue): under light load one thread stays hot, with its intra-op thread team (OpenMP keeps one
  // per calling thread) and the caches of the model it ran last, instead of requests going round 64 threads.
  struct Worker {
    std::condition_variable cv;
    std::optional<HttpRequest> job;
  };
  std::mutex mu;
  std::vector<std::unique_ptr<Worker>> pool;
  std::vector<Worker*> idle;   // most recently idle last
  std::deque<HttpRequest> backlog;  // when every worker is busy
  std::vector<std::pair<evhttp_request*, HttpResponse>> done;
  bool workers_stop = false;
  std::vector<std::thread> workers;
  size_t deferred = 0;  // deferred requests whose Reply is still out (answered into `done`, or dropped)
  std::condition_variable drained;

  void start() {
    static const int threads_ready = evthread_use_pthreads();  // before any event_base: cross-thread event_active
    if (threads_ready != 0) throw std::runtime_error("libevent: no pthreads support");
    base = event_base_new();
    http = base ? evhttp_new(base) : nullptr;
    if (!http) throw std::runtime_error("libevent: cannot create the HTTP server");
    if (!options.tls.cert.empty()) ssl = make_tls_context(options.tls);
    evhttp_set_bevcb(http, &Impl::new_bufferevent, this);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                         EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
    evhttp_set_max_headers_size(http, kMaxHeaderBytes);
    // the body as sent (compressed or not): a compressed body is at most a little larger than its decoded bytes
    const size_t max = options.max_request_bytes;
    evhttp_set_max_body_size(http, static_cast<ev_ssize_t>(max + max / 64 + 4096));
    if (options.max_buffered_bytes < max) throw std::runtime_error("max_buffered_bytes is below max_request_bytes");
    evhttp_set_timeout(http, options.idle_timeout_seconds);
    evhttp_set_gencb(http, &Impl::on_request, this);
    bound = evhttp_bind_socket_with_handle(http, options.host.c_str(), static_cast<uint16_t>(options.port));
    if (!bound) throw std::runtime_error("cannot listen on " + options.host + ":" + std::to_string(options.port));
    const int fd = evhttp_bound_socket_get_fd(bound);
    // libevent listens with a backlog of 128; a burst of clients connecting at once needs the system's maximum
    if (::listen(fd, SOMAXCONN) != 0) log("warning", "cannot raise the listen backlog", {{"error", std::strerror(errno)}});
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    }
    evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(bound), &Impl::on_accept_error);
    wake = event_new(base, -1, EV_PERSIST, &Impl::on_wake, this);
    stop_event = event_new(base, -1, 0, &Impl::on_stop, this);
    accept_retry = evtimer_new(base, &Impl::on_accept_retry, this);
    if (!wake || !stop_event || !accept_retry || event_add(wake, nullptr) != 0) {
      throw std::runtime_error("libevent: cannot create events");
    }
    for (size_t i = 0; i < options.workers; ++i) {
      pool.push_back(std::make_unique<Worker>());
      workers.emplace_back([this, w = pool.back().get()] { work(*w); });
    }
  }

  // Each connection's bufferevent (as evhttp makes it, or over TLS), its input counted as it arrives.
  static bufferevent* new_bufferevent(event_base* base, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    bufferevent* bev = nullptr;
    if (self->ssl) {
      SSL* s = SSL_new(self->ssl);
      if (!s) return nullptr;
      bev = bufferevent_openssl_socket_new(base, -1, s, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
      if (bev) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);  // clients that close without close_notify
    } else {
      bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    // the callback runs on the loop thread (loop_owner), as long as the buffer lives
    if (bev) evbuffer_add_cb(bufferevent_get_input(bev), &Impl::on_input, bev);
    return bev;
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      workers_stop = true;
    }
    for (auto& w : pool) w->cv.notify_all();
    for (auto& t : workers) t.join();
    {
      // a completion still to come would use this object: the models finish what they queued
      std::unique_lock<std::mutex> lock(mu);
      drained.wait(lock, [&] { return deferred == 0; });
    }
    for (auto& j : backlog) {
      if (j.body) evbuffer_free(j.body);
    }
    if (accept_retry) event_free(accept_retry);
    if (stop_event) event_free(stop_event);
    if (wake) event_free(wake);
    if (http) evhttp_free(http);  // closes the connections still open
    if (base) event_base_free(base);
    if (ssl) SSL_CTX_free(ssl);
  }

  // Sends an answer; until it is written (or its connection is gone) a stop waits for it.
  void send(evhttp_request* req, HttpResponse& res) {
    if (evhttp_connection* conn = evhttp_request_get_connection(req)) {
      unsent.insert(conn);
      evhttp_request_set_on_complete_cb(req, &Impl::on_sent, this);
      evhttp_connection_set_closecb(conn, &Impl::on_closed, this);
    }
    evkeyvalq* out = evhttp_request_get_output_headers(req);
    if (!res.content_type.empty()) evhttp_add_header(out, "Content-Type", res.content_type.c_str());
    for (const auto& [k, v] : res.headers) evhttp_add_header(out, k.c_str(), v.c_str());
    if (res.close) evhttp_add_header(out, "Connection", "close");
    evbuffer* buf = evbuffer_new();
    if (buf && !res.body.empty()) {
      // the body's bytes go out as they are: the buffer references the string until it is sent
      auto* owned = new std::string(std::move(res.body));
      if (evbuffer_add_reference(buf, owned->data(), owned->size(),
                                 [](const void*, size_t, void* p) { delete static_cast<std::string*>(p); }, owned) != 0) {
        delete owned;
      }
    }
    evhttp_send_reply(req, res.status, reason(res.status), buf);
    if (buf) evbuffer_free(buf);
  }

  static void on_sent(evhttp_request* req, void* arg) {
    static_cast<Impl*>(arg)->written(evhttp_request_get_connection(req));
  }
  static void on_closed(evhttp_connection* conn, void* arg) { static_cast<Impl*>(arg)->written(conn); }
  void written(evhttp_connection* conn) {
    unsent.erase(conn);
    exit_if_stopped();
  }
  void exit_if_stopped() {
    if (stopping && in_flight == 0 && unsent.empty()) event_base_loopexit(base, nullptr);
  }

  static void on_request(evhttp_request* req, void* arg) { static_cast<Impl*>(arg)->request(req); }

  static thread_local Impl* loop_owner;  // the Impl whose loop runs on this thread

  static void on_input(evbuffer*, const evbuffer_cb_info* info, void* arg) {
    if (info->n_added == 0 || !loop_owner) return;
    auto* bev = static_cast<bufferevent*>(arg);
    loop_owner->bytes.received(bev, bufferevent_getfd(bev), info->n_added);
  }

  void release_body(HttpRequest& r) {
    if (r.body) evbuffer_free(r.body);
    r.body = nullptr;
    bytes.release(r.counted);
    r.counted = 0;
  }

  void request(evhttp_request* req) {
    // else a small answer waits for the client's delayed ACK (40 ms measured)
    if (evhttp_connection* conn = evhttp_request_get_connection(req)) {
      bufferevent* bev = evhttp_connection_get_bufferevent(conn);
      const evutil_socket_t fd = bufferevent_getfd(bev);
      bytes.received_whole(bev, fd);
      const int on = 1;
      if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      // libevent writes 16 KB per loop iteration by default: an answer goes out in as few writes as the socket takes
      bufferevent_set_max_single_write(bev, kMaxSingleWrite);
    }
    const evhttp_cmd_type cmd = evhttp_request_get_command(req);
    HttpRequest r;
    r.req = req;
    r.get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    r.post = cmd == EVHTTP_REQ_POST;
    r.method = cmd == EVHTTP_REQ_GET ? "GET" : cmd == EVHTTP_REQ_HEAD ? "HEAD" : cmd == EVHTTP_REQ_POST ? "POST"
             : cmd == EVHTTP_REQ_PUT ? "PUT" : cmd == EVHTTP_REQ_DELETE ? "DELETE" : cmd == EVHTTP_REQ_PATCH ? "PATCH"
             : "OPTIONS";
    const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
    const char* path = uri ? evhttp_uri_get_path(uri) : nullptr;
    r.path = path ? path : "";
    if (stopping) {
      HttpResponse res = error_response(503, "the server is stopping");
      res.close = true;
      send(req, res);
      return;
    }
    r.segments = split_path(path);
    evkeyvalq* in = evhttp_request_get_input_headers(req);
    r.content_encoding = header(in, "Content-Encoding");
    r.accept_encoding = header(in, "Accept-Encoding");
    r.content_type = header(in, "Content-Type");
    r.header_length = header(in, kHeaderLength, &r.has_header_length);
    evbuffer* input = evhttp_request_get_input_buffer(req);
    if (evbuffer_get_length(input) > 0) {
      r.body = evbuffer_new();
      if (!r.body || evbuffer_add_buffer(r.body, input) != 0) {  // moves the chain, copies nothing
        if (r.body) evbuffer_free(r.body);
        HttpResponse res = error_response(503, "out of memory for this request");
        send(req, res);
        return;
      }
      r.counted = evbuffer_get_length(r.body);
      bytes.queue(r.counted);
    }
    HttpResponse answer;
    const HttpHandler::Handling route = handler.on_loop(r, answer, {in_flight == 0, [this, req] { return defer(req); }});
    if (route == HttpHandler::Handling::Answered) {
      release_body(r);
      send(req, answer);
      return;
    }
    ++in_flight;
    if (route == HttpHandler::Handling::Deferred) {
      release_body(r);
      return;
    }
    if (r.body && evbuffer_get_length(r.body) == 0) release_body(r);  // taken on the loop already
    std::lock_guard<std::mutex> lock(mu);
    if (idle.empty()) {
      backlog.push_back(std::move(r));
      return;
    }
    Worker* w = idle.back();
    idle.pop_back();
    w->job = std::move(r);
    w->cv.notify_one();
  }

  Reply defer(evhttp_request* req) {
    Reply reply(std::make_shared<Reply::State>(this, req));  // counted once it exists: its end uncounts it
    std::lock_guard<std::mutex> lock(mu);
    ++deferred;
    return reply;
  }

  // A deferred request's answer (any thread), or its Reply dropped unanswered (the request went to a worker).
  void deferred_end(evhttp_request* req, HttpResponse* res) {
    std::lock_guard<std::mutex> lock(mu);
    if (res) {
      done.emplace_back(req, std::move(*res));
      event_active(wake, EV_READ, 0);
    }
    --deferred;
    drained.notify_all();
  }

  void work(Worker& self) {
    while (true) {
      HttpRequest r;
      {
        std::unique_lock<std::mutex> lock(mu);
        if (!backlog.empty()) {
          r = std::move(backlog.front());
          backlog.pop_front();
        } else {
          idle.push_back(&self);
          self.cv.wait(lock, [&] { return workers_stop || self.job.has_value(); });
          if (!self.job) return;  // stopping: idle workers are no longer listed
          r = std::move(*self.job);
          self.job.reset();
        }
      }
      HttpResponse res = handler.handle(r);
      release_body(r);
      {
        std::lock_guard<std::mutex> lock(mu);
        done.emplace_back(r.req, std::move(res));
      }
      event_active(wake, EV_READ, 0);
    }
  }

  static void on_wake(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    std::vector<std::pair<evhttp_request*, HttpResponse>> ready;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      ready.swap(self->done);
    }
    for (auto& [req, res] : ready) {
      self->send(req, res);  // a request whose client left is freed by libevent here
      --self->in_flight;
    }
    self->exit_if_stopped();
  }

  static void on_stop(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    if (self->stopping) return;
    self->stopping = true;
    if (self->bound) {
      evhttp_del_accept_socket(self->http, self->bound);  // closes the listening socket
      self->bound = nullptr;
    }
    self->exit_if_stopped();
  }

  // Out of file descriptors (or another accept error): pause accepting for a moment instead of spinning on the
  // listening socket, which stays readable.
  static void on_accept_error(evconnlistener* listener, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    const int err = EVUTIL_SOCKET_ERROR();
    const auto now = std::chrono::steady_clock::now();
    if (now - self->last_accept_warning > std::chrono::seconds(10)) {
      self->last_accept_warning = now;
      log("warning", "cannot accept connections; pausing accepts for 100 ms",
          {{"error", evutil_socket_error_to_string(err)}});
    }
    evconnlistener_disable(listener);
    const timeval pause{0, 100 * 1000};
    evtimer_add(self->accept_retry, &pause);
  }

  static void on_accept_retry(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    if (self->bound) evconnlistener_enable(evhttp_bound_socket_get_listener(self->bound));
  }
};

thread_local HttpServer::Impl* HttpServer::Impl::loop_owner = nullptr;

struct Reply::State {
  State(HttpServer::Impl* server, evhttp_request* req) : server(server), req(req) {}
  ~State() {
    if (!answered.exchange(true)) server->deferred_end(req, nullptr);
  }
  HttpServer::Impl* server;
  evhttp_request* req;
  std::atomic<bool> answered{false};
};

void Reply::operator()(HttpResponse response) const {
  if (!state_->answered.exchange(true)) state_->server->deferred_end(state_->req, &response);
}

HttpServer::HttpServer(HttpHandler& handler, HttpOptions options)
    : impl_(std::make_unique<Impl>(handler, std::move(options))) {
  impl_->start();
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->port; }

bool HttpServer::run() {
  Impl::loop_owner = impl_.get();
  // the loop runs on with no connection open (requests may still be with the workers) until stop()
  return event_base_loop(impl_->base, EVLOOP_NO_EXIT_ON_EMPTY) == 0;
}

void HttpServer::stop() { event_active(impl_->stop_event, EV_READ, 0); }

}  // namespace pt2serve
