// pt2serve's HTTP server: libevent's evhttp on one event loop thread that holds every connection (a slow or idle
// client costs a socket and a small buffer, not a thread), the bound on request bytes held, TLS, a pool of worker
// threads and the sending of answers. It knows no endpoint: an HttpHandler (http_api.h) routes each request.
// docs/serving.md "Limits and attacks".
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "options.h"

struct evbuffer;
struct evhttp_request;

namespace pt2serve {

// The Open Inference Protocol's binary extension: the JSON header's length, the tensors' bytes after it. The one
// protocol header the loop takes off a request (header_length) and a response may carry.
inline constexpr const char* kHeaderLength = "Inference-Header-Content-Length";

// A request as the loop took it off libevent's structures; a worker may hold it (never its evhttp_request).
struct HttpRequest {
  evhttp_request* req = nullptr;  // the loop's
  bool get = false, post = false;
  std::string method, path;
  std::vector<std::string> segments;  // the path's, percent-decoded
  std::string content_encoding, accept_encoding, content_type, header_length;
  bool has_header_length = false;
  evbuffer* body = nullptr;  // the body's bytes, moved out of the connection's buffer; the handler may drain it
  size_t counted = 0;        // of them, what counts against max_buffered_bytes until the body is released
  std::shared_ptr<void> handler_state;  // what the handler made of the request on the loop, for its worker
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;
};

// Answers a deferred request, once, from any thread. Dropped unanswered, it tells the server the request went
// another way (the handler then returns Handling::Worker for it).
class Reply {
 public:
  struct State;
  explicit Reply(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void operator()(HttpResponse response) const;

 private:
  std::shared_ptr<State> state_;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  enum class Handling {
    Answered,  // the loop sends `answer` now
    Worker,    // a worker calls handle() (the body as the handler left it)
    Deferred,  // answered later through the Reply the handler took with defer()
  };
  struct Loop {
    bool idle;                    // no request is with a worker or deferred
    std::function<Reply()> defer;  // the Reply of a request the handler defers
  };
  // On the loop thread, for each request: quick.
  virtual Handling on_loop(HttpRequest& request, HttpResponse& answer, const Loop& loop) = 0;
  // On a worker thread: the answer.
  virtual HttpResponse handle(HttpRequest& request) = 0;
};

class HttpServer {
 public:
  // Binds and listens; throws std::runtime_error saying why when it cannot (the address, the TLS material).
  HttpServer(HttpHandler& handler, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Serves until stop(); false when the event loop failed.
  bool run();
  // From any thread: stop accepting, finish the requests in flight, then run() returns. Requests that arrive
  // meanwhile on open connections are answered 503 and their connection closed.
  void stop();

 private:
  struct Impl;
  friend struct Reply::State;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pt2serve
