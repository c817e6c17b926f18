// pt2serve's HTTP/REST front: the Open Inference Protocol's endpoints over libevent's evhttp. One event loop
// thread holds every connection (a slow or idle client costs a socket and a small buffer, not a thread) and
// answers the health probes itself; requests that touch a model run on a pool of worker threads and their
// answers go back through the loop. docs/serving.md "Limits and attacks".
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "repository.h"

namespace pt2serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port
  size_t workers = 64;             // requests handled at once (each may wait for a batch)
  size_t max_request_bytes = 64u << 20;  // a body, once decoded
  // request bytes held at once - sent on connections whose request is not complete yet, and bodies waiting for a
  // worker: past it the connection that has sent the most is closed (docs/serving.md "Limits and attacks")
  size_t max_buffered_bytes = 512u << 20;
  int idle_timeout_seconds = 60;   // a connection that sends or takes nothing for this long is closed
  // PEM files: a certificate (chain) and its key turn on HTTPS, client CAs mutual TLS
  std::string tls_cert, tls_key, tls_client_ca;
};

class HttpService {
 public:
  // Binds and listens; throws std::runtime_error saying why when it cannot (the address, the TLS material).
  HttpService(Registry& registry, HttpOptions options);
  ~HttpService();
  HttpService(const HttpService&) = delete;
  HttpService& operator=(const HttpService&) = delete;

  // Throws std::runtime_error saying what is wrong with these PEM files (a start checks them before loading models).
  static void check_tls(const std::string& cert, const std::string& key, const std::string& client_ca);

  int port() const;
  // Serves until stop(); false when the event loop failed.
  bool run();
  // From any thread: stop accepting, finish the requests in flight, then run() returns. Requests that arrive
  // meanwhile on open connections are answered 503 and their connection closed.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pt2serve
