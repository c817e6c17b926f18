// pt2serve's HTTP/REST API: the Open Inference Protocol's endpoints (and /metrics) as an HttpHandler. Each request's
// path is parsed once into its route; the loop answers the health probes and the server's metadata itself, runs a
// small inference of a quick model inline when idle, queues a small inference of a batching model for its batcher
// (answered from the batcher's completion), and leaves the rest to a worker.
#pragma once

#include <cstddef>
#include <string>

#include "http_server.h"
#include "repository.h"

namespace pt2serve {

enum class Endpoint {
  None,  // 404
  HealthLive,
  HealthReady,
  ServerMetadata,
  ModelMetadata,
  ModelReady,
  ModelInfer,
  RepositoryIndex,
  RepositoryLoad,
  RepositoryUnload,
  Metrics,
};

struct Route {
  Endpoint endpoint = Endpoint::None;
  std::string model, version;  // version empty: the highest ready one
};

// The route of a method and a percent-decoded path.
Route route_of(bool get, bool post, const std::vector<std::string>& segments);

class HttpApi final : public HttpHandler {
 public:
  HttpApi(Registry& registry, size_t max_request_bytes) : registry_(registry), max_request_bytes_(max_request_bytes) {}
  Handling on_loop(HttpRequest& request, HttpResponse& answer, const Loop& loop) override;
  HttpResponse handle(HttpRequest& request) override;

 private:
  Handling loop_inference(HttpRequest& r, const Route& route, HttpResponse& answer, const Loop& loop);
  HttpResponse respond_to(HttpRequest& r, const Route& route);

  Registry& registry_;
  size_t max_request_bytes_;
};

}  // namespace pt2serve
