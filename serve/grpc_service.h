// The gRPC transport of pt2serve (GRPCInferenceService); the generated protobuf code stays behind this header.
#pragma once

#include <memory>
#include <string>

namespace pt2serve {

class Registry;

// PEM contents (not paths). Empty cert: no TLS. client_ca: clients must present a certificate it signed.
struct TlsPem {
  std::string cert, key, client_ca;
};

class GrpcServer {
 public:
  // Listens on host:port (0: any free port, see port()); port() is -1 when it cannot listen.
  GrpcServer(Registry& registry, const std::string& host, int port, size_t max_message_bytes, const TlsPem& tls = {});
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
