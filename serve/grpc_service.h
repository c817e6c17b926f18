// The gRPC transport of pt2serve (GRPCInferenceService); the generated protobuf code stays behind this header.
#pragma once

#include <memory>
#include <string>

#include "options.h"

namespace pt2serve {

class Registry;

class GrpcServer {
 public:
  // Listens on host:port (0: any free port, see port()); port() is -1 when it cannot listen. max_request_bytes
  // bounds a message.
  GrpcServer(Registry& registry, const ListenOptions& options);
  ~GrpcServer();
  int port() const { return port_; }
  // Stops taking calls; calls in flight get up to `seconds` to finish.
  void shutdown(double seconds);
  void wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace pt2serve
