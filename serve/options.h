// pt2serve's settings: what each transport listens with, and the whole command line parsed into ServeOptions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "repository.h"

namespace pt2serve {

// What both transports listen with (HttpServer's options extend it; GrpcServer takes it as it is).
struct ListenOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                       // 0: any free port
  size_t max_request_bytes = 64u << 20;  // a request body (a gRPC message), once decoded
  // PEM contents, read once at start. Empty cert: no TLS; client_ca: clients must present a certificate it signed.
  struct Tls {
    std::string cert, key, client_ca;
  } tls;
};

struct HttpOptions : ListenOptions {
  size_t workers = 64;  // requests handled at once (each may wait for a batch)
  // request bytes held at once - sent on connections whose request is not complete yet, and bodies waiting for a
  // worker: past it the connection that has sent the most is closed (docs/serving.md "Limits and attacks")
  size_t max_buffered_bytes = 512u << 20;
  int idle_timeout_seconds = 60;  // a connection that sends or takes nothing for this long is closed
};

struct ServeOptions {
  std::string repository;
  ModelControl control = ModelControl::None;
  double poll_seconds = 15;      // --model-control-mode poll
  double shutdown_seconds = 30;  // on SIGTERM, how long in-flight requests may take
  HttpOptions http;
  bool grpc_on = true;
  ListenOptions grpc;
  std::string tls_files;  // the PEM files' paths, for messages
};

// pt2serve's command line (--help lists it). Returns an exit status when the process should end now (--help and
// --version: 0; a bad flag or an unreadable TLS file: 2, said on stderr or in the log), else nothing.
std::optional<int> parse_serve_options(int argc, char** argv, ServeOptions& options);

}  // namespace pt2serve
