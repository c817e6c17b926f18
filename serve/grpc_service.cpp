// The Open Inference Protocol's GRPCInferenceService over the same models as HTTP.
#include "grpc_service.h"

#include <cstring>
#include <map>
#include <optional>

#include "grpc_infer.h"
#include "repository.h"
#include "open_inference_grpc.grpc.pb.h"
#include "protocol.h"

#include <grpcpp/grpcpp.h>

namespace pt2serve {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

class Service final : public inference::GRPCInferenceService::Service {
 public:
  Service(Registry& registry, size_t max_bytes) : registry_(registry), max_bytes_(max_bytes) {}

  Status ServerLive(ServerContext*, const inference::ServerLiveRequest*, inference::ServerLiveResponse* r) override {
    r->set_live(true);
    return Status::OK;
  }
  Status ServerReady(ServerContext*, const inference::ServerReadyRequest*, inference::ServerReadyResponse* r) override {
    r->set_ready(true);
    return Status::OK;
  }
  Status ModelReady(ServerContext*, const inference::ModelReadyRequest* q, inference::ModelReadyResponse* r) override {
    return guarded([&] { r->set_ready(registry_.find(q->name(), q->version(), false)->ready()); });
  }
  Status ServerMetadata(ServerContext*, const inference::ServerMetadataRequest*,
                        inference::ServerMetadataResponse* r) override {
    r->set_name("pt2serve");
    r->set_version(PT2SERVE_VERSION);
    r->add_extensions("binary_tensor_data");
    return Status::OK;
  }
  Status ModelMetadata(ServerContext*, const inference::ModelMetadataRequest* q,
                       inference::ModelMetadataResponse* r) override {
    return guarded([&] {
      const ModelPtr mp = registry_.find(q->name(), q->version(), true);
      const Model& m = *mp;
      r->set_name(m.name());
      for (const auto& v : registry_.versions(m.name())) r->add_versions(v);
      r->set_platform("pt2rt");
      const auto fill = [](const pt2rt::TensorSpec& t, inference::ModelMetadataResponse::TensorMetadata* out) {
        out->set_name(t.name);
        out->set_datatype(datatype_name(t.dtype));
        for (const auto d : t.shape) out->add_shape(d);
      };
      for (const auto& t : m.spec().inputs) fill(t, r->add_inputs());
      for (const auto& t : m.spec().outputs) fill(t, r->add_outputs());
    });
  }
  Status RepositoryIndex(ServerContext*, const inference::RepositoryIndexRequest* q,
                         inference::RepositoryIndexResponse* r) override {
    return guarded([&] {
      check_repository(q->repository_name());
      for (const auto& e : registry_.index(q->ready())) {
        auto* m = r->add_models();
        m->set_name(e.name);
        m->set_version(e.version);
        m->set_state(e.state);
        m->set_reason(e.reason);
      }
    });
  }
  Status RepositoryModelLoad(ServerContext*, const inference::RepositoryModelLoadRequest* q,
                             inference::RepositoryModelLoadResponse*) override {
    return guarded([&] {
      check_repository(q->repository_name());
      std::vector<std::string> parameters;
      for (const auto& [key, value] : q->parameters()) parameters.push_back(key);
      registry_.load(q->model_name(), parameters);
    });
  }
  Status RepositoryModelUnload(ServerContext*, const inference::RepositoryModelUnloadRequest* q,
                               inference::RepositoryModelUnloadResponse*) override {
    return guarded([&] {
      check_repository(q->repository_name());
      std::vector<std::string> parameters;
      for (const auto& [key, value] : q->parameters()) parameters.push_back(key);
      registry_.unload(q->model_name(), parameters);
    });
  }
  Status ModelInfer(ServerContext*, const inference::ModelInferRequest* q, inference::ModelInferResponse* r) override {
    return guarded([&] { infer(*registry_.find(q->model_name(), q->model_version(), true), *q, r); });
  }

 private:
  template <typename F>
  static Status guarded(F&& f) {
    try {
      f();
      return Status::OK;
    } catch (...) {
      const Failure failure = current_failure();
      return Status(grpc_code(failure.kind), failure.message);
    }
  }

  static StatusCode grpc_code(ErrorKind kind) {
    switch (kind) {
      case ErrorKind::InvalidArgument: return StatusCode::INVALID_ARGUMENT;
      case ErrorKind::NotFound: return StatusCode::NOT_FOUND;
      case ErrorKind::TooLarge: return StatusCode::RESOURCE_EXHAUSTED;
      case ErrorKind::Unavailable: return StatusCode::UNAVAILABLE;
      case ErrorKind::Internal: break;
    }
    return StatusCode::INTERNAL;
  }

  // The model keeps the books: its request counted by infer(), or as unreadable when it cannot be parsed.
  void infer(Model& m, const inference::ModelInferRequest& q, inference::ModelInferResponse* r) const {
    const auto& spec = m.spec();
    GrpcInferRequest request;
    try {
      request = parse_grpc_infer(spec, q, max_bytes_);
    } catch (...) {
      m.count_unreadable_request();
      throw;
    }
    const auto outputs = m.infer(std::move(request.inputs));
    try {
      r->set_model_name(m.name());
      r->set_model_version(m.version());
      r->set_id(q.id());
      for (const size_t i : request.outputs) {
        const auto& t = outputs[i];
        auto* out = r->add_outputs();
        out->set_name(spec.outputs[i].name);
        out->set_datatype(datatype_name(t.dtype()));
        for (const auto d : t.shape()) out->add_shape(d);
        r->add_raw_output_contents(static_cast<const char*>(t.data()), t.nbytes());
      }
    } catch (...) {
      m.count_unanswered_request();
      throw;
    }
  }

  // One repository: a repository name is refused, not ignored.
  static void check_repository(const std::string& repository_name) {
    if (!repository_name.empty()) {
      throw BadRequest("repository_name '" + repository_name + "': pt2serve serves one repository; leave it empty");
    }
  }

  Registry& registry_;
  size_t max_bytes_;
};

}  // namespace

struct GrpcServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
};

GrpcServer::GrpcServer(Registry& registry, const ListenOptions& options) : impl_(std::make_unique<Impl>()) {
  const size_t max_message_bytes = options.max_request_bytes;
  const ListenOptions::Tls& tls = options.tls;
  impl_->service = std::make_unique<Service>(registry, max_message_bytes);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!tls.cert.empty()) {
    grpc::SslServerCredentialsOptions options(
        tls.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    options.pem_key_cert_pairs.push_back({tls.key, tls.cert});
    options.pem_root_certs = tls.client_ca;
    credentials = grpc::SslServerCredentials(options);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.host + ":" + std::to_string(options.port), credentials, &port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
  // gRPC 1.51 inflates a compressed message before it checks the size limit: compressed requests are refused
  // (UNIMPLEMENTED, from the grpc-encoding header, before the message is read).
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  builder.RegisterService(impl_->service.get());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server) port_ = -1;
}

GrpcServer::~GrpcServer() = default;

void GrpcServer::shutdown(double seconds) {
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)));
  }
}

void GrpcServer::wait() {
  if (impl_->server) impl_->server->Wait();
}

}  // namespace pt2serve
