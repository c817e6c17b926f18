// The Open Inference Protocol's GRPCInferenceService over the same models as HTTP.
#include "grpc_service.h"

#include <cstring>
#include <map>
#include <optional>

#include "model.h"
#include "open_inference_grpc.grpc.pb.h"

#include <grpcpp/grpcpp.h>

namespace pt2serve {
namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

template <typename T>
void append(std::vector<uint8_t>& out, const google::protobuf::RepeatedField<T>& values, size_t size) {
  for (const T v : values) {
    const size_t at = out.size();
    out.resize(at + size);
    switch (size) {
      case 1: { const uint8_t x = static_cast<uint8_t>(v); std::memcpy(out.data() + at, &x, 1); break; }
      case 2: { const int16_t x = static_cast<int16_t>(v); std::memcpy(out.data() + at, &x, 2); break; }
      case 4: {
        if constexpr (std::is_floating_point_v<T>) {
          const float x = static_cast<float>(v);
          std::memcpy(out.data() + at, &x, 4);
        } else {
          const int32_t x = static_cast<int32_t>(v);
          std::memcpy(out.data() + at, &x, 4);
        }
        break;
      }
      default: { const T x = v; std::memcpy(out.data() + at, &x, sizeof(T)); break; }
    }
  }
}

// An input's bytes from InferTensorContents, by its datatype's field of the protocol.
std::vector<uint8_t> from_contents(const inference::InferTensorContents& c, pt2rt::DType dtype, const std::string& name) {
  using pt2rt::DType;
  std::vector<uint8_t> out;
  switch (dtype) {
    case DType::Float32: append(out, c.fp32_contents(), 4); break;
    case DType::Float64: append(out, c.fp64_contents(), 8); break;
    case DType::Int64: append(out, c.int64_contents(), 8); break;
    case DType::Int32: append(out, c.int_contents(), 4); break;
    case DType::Int16: append(out, c.int_contents(), 2); break;
    case DType::Int8: append(out, c.int_contents(), 1); break;
    case DType::UInt8: append(out, c.uint_contents(), 1); break;
    case DType::Bool: append(out, c.bool_contents(), 1); break;
    default:
      throw BadRequest("input '" + name + "': " + datatype_name(dtype) + " tensors go in raw_input_contents");
  }
  return out;
}

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
    ModelPtr model;
    const Status status = guarded([&] {
      model = registry_.find(q->model_name(), q->model_version(), true);
      model->stats().requests++;
      infer(*model, *q, r);
    });
    if (!status.ok() && model) model->stats().failures++;
    return status;
  }

 private:
  template <typename F>
  static Status guarded(F&& f) {
    try {
      f();
      return Status::OK;
    } catch (const NotFound& e) {
      return Status(StatusCode::NOT_FOUND, e.what());
    } catch (const BadRequest& e) {
      return Status(StatusCode::INVALID_ARGUMENT, e.what());
    } catch (const Unavailable& e) {
      return Status(StatusCode::UNAVAILABLE, e.what());
    } catch (const pt2rt::Error& e) {
      const bool client = e.code() == pt2rt::ErrorCode::Input || e.code() == pt2rt::ErrorCode::Usage;
      return Status(client ? StatusCode::INVALID_ARGUMENT : StatusCode::INTERNAL, e.what());
    } catch (const std::exception& e) {
      return Status(StatusCode::INTERNAL, e.what());
    }
  }

  void infer(Model& m, const inference::ModelInferRequest& q, inference::ModelInferResponse* r) const {
    const auto& spec = m.spec();
    const bool raw = q.raw_input_contents_size() > 0;
    if (raw && q.raw_input_contents_size() != q.inputs_size()) {
      throw BadRequest("raw_input_contents has " + std::to_string(q.raw_input_contents_size()) +
                       " entries for " + std::to_string(q.inputs_size()) + " inputs");
    }
    RequestInputs inputs(spec, max_bytes_);
    for (int k = 0; k < q.inputs_size(); ++k) {
      const auto& in = q.inputs(k);
      const auto slot = inputs.check(in.name(), in.datatype(), {in.shape().begin(), in.shape().end()});
      if (raw) {
        const std::string& blob = q.raw_input_contents(k);
        if (blob.size() != slot.bytes) {
          throw BadRequest("input '" + in.name() + "': raw_input_contents has " + std::to_string(blob.size()) +
                           " bytes, its shape and datatype need " + std::to_string(slot.bytes));
        }
        inputs.set(slot, blob.data());
      } else {
        const auto data = from_contents(in.contents(), slot.dtype, in.name());
        if (data.size() != slot.bytes) {
          throw BadRequest("input '" + in.name() + "': contents hold " +
                           std::to_string(data.size() / itemsize(slot.dtype)) + " elements, its shape " +
                           std::to_string(slot.count));
        }
        inputs.set(slot, data.data());
      }
    }
    auto outputs = m.infer(inputs.take());
    std::vector<size_t> wanted;
    for (const auto& o : q.outputs()) wanted.push_back(output_index(spec, o.name()));
    if (wanted.empty()) {
      for (size_t i = 0; i < spec.outputs.size(); ++i) wanted.push_back(i);
    }
    r->set_model_name(m.name());
    r->set_model_version(m.version());
    r->set_id(q.id());
    for (const size_t i : wanted) {
      const auto& t = outputs[i];
      auto* out = r->add_outputs();
      out->set_name(spec.outputs[i].name);
      out->set_datatype(datatype_name(t.dtype()));
      for (const auto d : t.shape()) out->add_shape(d);
      r->add_raw_output_contents(static_cast<const char*>(t.data()), t.nbytes());
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

GrpcServer::GrpcServer(Registry& registry, const std::string& host, int port, size_t max_message_bytes)
    : impl_(std::make_unique<Impl>()) {
  impl_->service = std::make_unique<Service>(registry, max_message_bytes);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(host + ":" + std::to_string(port), grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(INT32_MAX);
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
