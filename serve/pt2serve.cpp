// pt2serve: the models of a repository behind the Open Inference Protocol (KServe v2) over HTTP/REST, JSON tensors
// and the binary tensor data extension. docs/serving.md.
#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <pthread.h>
#include <sys/socket.h>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <pt2rt/pt2rt.h>

#include "grpc_service.h"
#include "log.h"
#include "model.h"

using nlohmann::json;
using pt2rt::DType;

namespace pt2serve {
namespace {

constexpr const char* kVersion = PT2SERVE_VERSION;
constexpr const char* kHeaderLength = "Inference-Header-Content-Length";

json shape_json(const std::vector<int64_t>& shape) { return json(shape); }

json tensor_metadata(const pt2rt::TensorSpec& t) {
  return {{"name", t.name}, {"datatype", datatype_name(t.dtype)}, {"shape", shape_json(t.shape)}};
}

class Server {
 public:
  Server(Registry& registry, size_t max_request_bytes) : registry_(registry), max_request_bytes_(max_request_bytes) {}

  void routes(httplib::Server& svr) {
    svr.Get("/v2", [this](const httplib::Request&, httplib::Response& res) {
      reply(res, 200, {{"name", "pt2serve"}, {"version", kVersion}, {"extensions", {"binary_tensor_data", "model_repository"}}});
    });
    svr.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    svr.Get("/v2/health/ready", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    svr.Get(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)", [this](const httplib::Request& req, httplib::Response& res) {
      handle(res, [&] { metadata(req, res); });
    });
    svr.Get(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/ready)", [this](const httplib::Request& req,
                                                                         httplib::Response& res) {
      handle(res, [&] {
        ModelPtr m = find(req, /*need_ready=*/false);
        res.status = 200;
        if (!m->ready()) reply(res, 400, {{"error", "model " + m->name() + " is not ready: " + m->load_error()}});
      });
    });
    svr.Post(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/infer)", [this](const httplib::Request& req,
                                                                          httplib::Response& res) {
      handle(res, [&] { infer(req, res); });
    });
    // Triton's model repository extension: the index, and (re)loading or unloading a model while serving
    svr.Post("/v2/repository/index", [this](const httplib::Request& req, httplib::Response& res) {
      handle(res, [&] {
        const json body = repository_body(req, "repository index");
        if (body.contains("ready") && !body["ready"].is_boolean()) {
          throw BadRequest("repository index: 'ready' must be true or false");
        }
        json index = json::array();
        for (const auto& e : registry_.index(body.value("ready", false))) {
          json entry = {{"name", e.name}, {"version", e.version}, {"state", e.state}};
          if (!e.reason.empty()) entry["reason"] = e.reason;
          index.push_back(entry);
        }
        reply(res, 200, index);
      });
    });
    svr.Post(R"(/v2/repository/models/([^/]+)/load)", [this](const httplib::Request& req, httplib::Response& res) {
      handle(res, [&] {
        std::vector<std::string> parameters;
        repository_body(req, "load", &parameters);
        registry_.load(req.matches[1], parameters);
        reply(res, 200, json::object());
      });
    });
    svr.Post(R"(/v2/repository/models/([^/]+)/unload)", [this](const httplib::Request& req, httplib::Response& res) {
      handle(res, [&] {
        std::vector<std::string> parameters;
        repository_body(req, "unload", &parameters);
        registry_.unload(req.matches[1], parameters);
        reply(res, 200, json::object());
      });
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    // errors httplib answers itself (before a route runs) get the protocol's JSON body too
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string what = "HTTP " + std::to_string(res.status);
      if (res.status == 404) what = "no such endpoint: " + req.method + " " + req.path;
      if (res.status == 413) {
        what = "the request body is too large: the limit is " + std::to_string(max_request_bytes_) +
               " bytes (--max-request-mb), and 8192 for a body sent as application/x-www-form-urlencoded " +
               "(send application/json or application/octet-stream)";
      }
      res.set_content(json{{"error", what}}.dump(), "application/json");
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      res.status = 500;
      res.set_content(json{{"error", what}}.dump(), "application/json");
    });
  }

 private:
  static void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  template <typename F>
  void handle(httplib::Response& res, F&& f) {
    try {
      f();
    } catch (const NotFound& e) {
      reply(res, 404, {{"error", e.what()}});
    } catch (const BadRequest& e) {
      reply(res, 400, {{"error", e.what()}});
    } catch (const Unavailable& e) {
      reply(res, 503, {{"error", e.what()}});
    } catch (const pt2rt::Error& e) {
      const bool client = e.code() == pt2rt::ErrorCode::Input || e.code() == pt2rt::ErrorCode::Usage;
      reply(res, client ? 400 : 500, {{"error", e.what()}});
    } catch (const std::exception& e) {
      reply(res, 500, {{"error", e.what()}});
    }
  }

  // The model (and version: the highest when none is named) of a /v2/models/{m}[/versions/{v}] path.
  ModelPtr find(const httplib::Request& req, bool need_ready) {
    const std::string version = req.matches.size() > 2 ? std::string(req.matches[2]) : "";
    return registry_.find(req.matches[1], version, need_ready);
  }

  void metadata(const httplib::Request& req, httplib::Response& res) {
    ModelPtr m = find(req, true);
    json versions = registry_.versions(m->name());
    json inputs = json::array(), outputs = json::array();
    for (const auto& t : m->spec().inputs) inputs.push_back(tensor_metadata(t));
    for (const auto& t : m->spec().outputs) outputs.push_back(tensor_metadata(t));
    reply(res, 200, {{"name", m->name()}, {"versions", versions}, {"platform", "pt2rt"}, {"inputs", inputs},
                     {"outputs", outputs}});
  }

  static void fill_from_json(const json& data, DType dtype, uint8_t* out, size_t count, const std::string& name) {
    std::vector<const json*> flat;
    std::vector<const json*> stack{&data};
    while (!stack.empty()) {  // row-major flattening of nested lists
      const json* j = stack.back();
      stack.pop_back();
      if (j->is_array()) {
        for (auto it = j->rbegin(); it != j->rend(); ++it) stack.push_back(&*it);
      } else {
        flat.push_back(j);
      }
    }
    if (flat.size() != count) {
      throw BadRequest("input '" + name + "': data has " + std::to_string(flat.size()) + " elements, its shape " +
                       std::to_string(count));
    }
    for (size_t i = 0; i < count; ++i) {
      const json& v = *flat[i];
      const auto number = [&]() {
        if (!v.is_number() && !v.is_boolean())
          throw BadRequest("input '" + name + "': element " + std::to_string(i) + " is not a number");
        return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>();
      };
      switch (dtype) {
        case DType::Float32: { const float f = static_cast<float>(number()); std::memcpy(out + 4 * i, &f, 4); break; }
        case DType::Float64: { const double d = number(); std::memcpy(out + 8 * i, &d, 8); break; }
        case DType::Int64: { const int64_t x = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(number()); std::memcpy(out + 8 * i, &x, 8); break; }
        case DType::Int32: { const int32_t x = static_cast<int32_t>(number()); std::memcpy(out + 4 * i, &x, 4); break; }
        case DType::Int16: { const int16_t x = static_cast<int16_t>(number()); std::memcpy(out + 2 * i, &x, 2); break; }
        case DType::Int8: { const int8_t x = static_cast<int8_t>(number()); out[i] = static_cast<uint8_t>(x); break; }
        case DType::UInt8: out[i] = static_cast<uint8_t>(number()); break;
        case DType::Bool: out[i] = number() != 0 ? 1 : 0; break;
        default:
          throw BadRequest("input '" + name + "': " + datatype_name(dtype) +
                           " tensors go as binary data (the binary tensor data extension), not JSON");
      }
    }
  }

  static json to_json(const pt2rt::Tensor& t) {
    json data = json::array();
    const auto* p = static_cast<const uint8_t*>(t.data());
    const auto n = static_cast<size_t>(t.numel());
    for (size_t i = 0; i < n; ++i) {
      switch (t.dtype()) {
        case DType::Float32: { float f; std::memcpy(&f, p + 4 * i, 4); data.push_back(f); break; }
        case DType::Float64: { double d; std::memcpy(&d, p + 8 * i, 8); data.push_back(d); break; }
        case DType::Int64: { int64_t x; std::memcpy(&x, p + 8 * i, 8); data.push_back(x); break; }
        case DType::Int32: { int32_t x; std::memcpy(&x, p + 4 * i, 4); data.push_back(x); break; }
        case DType::Int16: { int16_t x; std::memcpy(&x, p + 2 * i, 2); data.push_back(x); break; }
        case DType::Int8: data.push_back(static_cast<int8_t>(p[i])); break;
        case DType::UInt8: data.push_back(p[i]); break;
        case DType::Bool: data.push_back(p[i] != 0); break;
        default: throw BadRequest(std::string("output datatype ") + datatype_name(t.dtype()) +
                                  " goes as binary data: ask for it with \"binary_data\": true");
      }
    }
    return data;
  }

  void infer(const httplib::Request& req, httplib::Response& res) {
    ModelPtr m = find(req, true);
    m->stats().requests++;
    try {
      infer_checked(*m, req, res);
    } catch (...) {
      m->stats().failures++;
      throw;
    }
  }

  void infer_checked(Model& m, const httplib::Request& req, httplib::Response& res) {
    if (req.body.size() > max_request_bytes_) {
      throw BadRequest("the request has " + std::to_string(req.body.size()) + " bytes, more than the limit " +
                       std::to_string(max_request_bytes_) + " (--max-request-mb)");
    }
    size_t json_size = req.body.size();
    if (req.has_header(kHeaderLength)) {
      const std::string v = req.get_header_value(kHeaderLength);
      try {
        json_size = static_cast<size_t>(std::stoull(v));
      } catch (const std::exception&) {
        throw BadRequest(std::string(kHeaderLength) + " must be a number of bytes, got '" + v + "'");
      }
      if (json_size > req.body.size()) {
        throw BadRequest(std::string(kHeaderLength) + " is " + v + ", but the body has " +
                         std::to_string(req.body.size()) + " bytes");
      }
    }
    json body;
    try {
      body = json::parse(req.body.begin(), req.body.begin() + static_cast<std::ptrdiff_t>(json_size));
    } catch (const std::exception& e) {
      throw BadRequest(std::string("the request is not JSON: ") + e.what());
    }
    if (!body.is_object() || !body.contains("inputs") || !body["inputs"].is_array()) {
      throw BadRequest("expected a JSON object with \"inputs\": [...]");
    }
    const auto& spec = m.spec();
    RequestInputs inputs(spec, max_request_bytes_);
    size_t offset = json_size;
    for (const auto& in : body["inputs"]) {
      if (!in.is_object() || !in.contains("name") || !in["name"].is_string() || !in.contains("shape") ||
          !in["shape"].is_array() || !in.contains("datatype") || !in["datatype"].is_string()) {
        throw BadRequest("each input needs \"name\", \"shape\" and \"datatype\"");
      }
      const std::string name = in["name"];
      std::vector<int64_t> shape;
      for (const auto& d : in["shape"]) {
        if (!d.is_number_integer()) throw BadRequest("input '" + name + "': its shape must be a list of integers");
        shape.push_back(d.get<int64_t>());
      }
      const auto slot = inputs.check(name, in["datatype"], shape);
      const auto params = in.value("parameters", json::object());
      if (params.contains("binary_data_size")) {
        const auto size = params["binary_data_size"];
        if (!size.is_number_unsigned() || size.get<size_t>() != slot.bytes) {
          throw BadRequest("input '" + name + "': binary_data_size must be " + std::to_string(slot.bytes) +
                           " for shape and datatype given");
        }
        if (slot.bytes > req.body.size() - offset) {
          throw BadRequest("input '" + name + "': the body ends before its " + std::to_string(slot.bytes) + " bytes");
        }
        inputs.set(slot, req.body.data() + offset);
        offset += slot.bytes;
      } else if (in.contains("data")) {
        std::vector<uint8_t> buffer(slot.bytes);
        fill_from_json(in["data"], slot.dtype, buffer.data(), slot.count, name);
        inputs.set(slot, buffer.data());
      } else {
        throw BadRequest("input '" + name + "' has neither \"data\" nor parameters.binary_data_size");
      }
    }
    if (offset != req.body.size()) {
      throw BadRequest("the body has " + std::to_string(req.body.size() - offset) + " bytes no input claims");
    }

    auto outputs = m.infer(inputs.take());

    // which outputs, and which as binary data
    const bool binary_default = body.value("parameters", json::object()).value("binary_data_output", false);
    std::vector<std::pair<size_t, bool>> wanted;
    if (body.contains("outputs") && body["outputs"].is_array()) {
      for (const auto& o : body["outputs"]) {
        wanted.emplace_back(output_index(spec, o.value("name", "")),
                            o.value("parameters", json::object()).value("binary_data", binary_default));
      }
    } else {
      for (size_t i = 0; i < spec.outputs.size(); ++i) wanted.emplace_back(i, binary_default);
    }
    json out = {{"model_name", m.name()}, {"model_version", m.version()}, {"outputs", json::array()}};
    if (body.contains("id")) out["id"] = body["id"];
    std::string binary;
    for (const auto& [i, as_binary] : wanted) {
      const auto& t = outputs[i];
      json o = {{"name", spec.outputs[i].name}, {"datatype", datatype_name(t.dtype())}, {"shape", t.shape()}};
      if (as_binary) {
        o["parameters"] = {{"binary_data_size", t.nbytes()}};
        binary.append(static_cast<const char*>(t.data()), t.nbytes());
      } else {
        o["data"] = to_json(t);
      }
      out["outputs"].push_back(std::move(o));
    }
    const std::string header = out.dump(-1, ' ', false, json::error_handler_t::replace);
    res.status = 200;
    if (binary.empty()) {
      res.set_content(header, "application/json");
    } else {
      res.set_header(kHeaderLength, std::to_string(header.size()));
      res.set_content(header + binary, "application/octet-stream");
    }
  }

  std::string metrics() {
    std::string s;
    const auto family = [&](const char* name, const char* type, const char* help, auto value) {
      s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
      for (auto& m : registry_.models()) {
        s += std::string(name) + "{model=\"" + m->name() + "\",version=\"" + m->version() + "\"} " + value(*m) + "\n";
      }
    };
    family("pt2serve_model_ready", "gauge", "1 when the model version is loaded", [](Model& m) {
      return std::string(m.ready() ? "1" : "0");
    });
    family("pt2serve_requests_total", "counter", "inference requests", [](Model& m) {
      return std::to_string(m.stats().requests.load());
    });
    family("pt2serve_request_failures_total", "counter", "inference requests that failed", [](Model& m) {
      return std::to_string(m.stats().failures.load());
    });
    family("pt2serve_queue_seconds_total", "counter", "time requests waited for a batch", [](Model& m) {
      return std::to_string(m.stats().queue_ns.load() / 1e9);
    });
    family("pt2serve_compute_seconds_total", "counter", "time in the model", [](Model& m) {
      return std::to_string(m.stats().compute_ns.load() / 1e9);
    });
    family("pt2serve_batches_total", "counter", "model executions", [](Model& m) {
      return std::to_string(m.stats().batches.load());
    });
    s += "# HELP pt2serve_batch_size rows per model execution\n# TYPE pt2serve_batch_size histogram\n";
    for (auto& m : registry_.models()) {
      const std::string labels = "model=\"" + m->name() + "\",version=\"" + m->version() + "\"";
      uint64_t cumulative = 0;
      for (int b = 0; b < Stats::kBuckets; ++b) {
        cumulative += m->stats().batch_size_counts[b].load();
        const std::string le = b == Stats::kBuckets - 1 ? "+Inf" : std::to_string(1 << b);
        s += "pt2serve_batch_size_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
      }
      s += "pt2serve_batch_size_sum{" + labels + "} " + std::to_string(m->stats().batch_rows.load()) + "\n";
      s += "pt2serve_batch_size_count{" + labels + "} " + std::to_string(m->stats().batches.load()) + "\n";
    }
    return s;
  }

  // A repository request's JSON body (may be empty) and the names of its parameters (the registry judges them).
  static json repository_body(const httplib::Request& req, const char* what,
                              std::vector<std::string>* parameters = nullptr) {
    if (req.body.empty()) return json::object();
    const json body = json::parse(req.body, nullptr, false);
    if (!body.is_object()) throw BadRequest(std::string(what) + ": the body is not a JSON object");
    if (body.contains("parameters")) {
      const json& p = body["parameters"];
      if (!p.is_object()) throw BadRequest(std::string(what) + ": parameters must be a JSON object");
      for (const auto& [key, value] : p.items()) {
        if (parameters) parameters->push_back(key);
      }
    }
    return body;
  }

  Registry& registry_;
  size_t max_request_bytes_;
};

}  // namespace
}  // namespace pt2serve

int main(int argc, char** argv) {
  using namespace pt2serve;
  CLI::App app{"pt2serve: the models of a repository over the Open Inference Protocol (KServe v2)"};
  std::string repository, host = "127.0.0.1";
  int http_port = 8000, grpc_port = 8001, threads = 64;
  double max_request_mb = 64, shutdown_seconds = 30;
  std::string model_control = "none";
  app.add_option("--model-repository", repository, "DIR/<model>/<version>/model.pt2 (+ DIR/<model>/config.json)")
      ->required();
  app.add_option("--http-port", http_port, "HTTP port (0: pick one and log it)")->capture_default_str();
  app.add_option("--grpc-port", grpc_port, "gRPC port (0: pick one and log it; -1: no gRPC)")->capture_default_str();
  app.add_option("--host", host, "address to listen on")->capture_default_str();
  // cpp-httplib serves a keep-alive connection on one thread while it is open: fewer threads than clients leaves
  // the others queued (p99 57 ms vs 27 ms at 64 clients with 8 vs 16 threads, measured); idle threads cost a stack.
  app.add_option("--http-threads", threads, "HTTP worker threads: at least the concurrent keep-alive clients")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-request-mb", max_request_mb, "largest request body")->capture_default_str();
  app.add_option("--shutdown-seconds", shutdown_seconds, "on SIGTERM, how long in-flight requests may take")
      ->capture_default_str();
  app.add_option("--model-control-mode", model_control,
                 "none: the models loaded at start serve until exit; explicit: POST /v2/repository/models/{m}/load "
                 "and /unload (re)load and unload them while serving")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "explicit"}));
  app.set_version_flag("--version", std::string("pt2serve ") + PT2SERVE_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  // SIGTERM and SIGINT are taken by one thread (sigwait): blocked here, before any other thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::vector<ModelPtr> models;
  try {
    models = load_repository(repository);
  } catch (const std::exception& e) {
    log("error", e.what());
    return 2;
  }
  const size_t max_request_bytes = static_cast<size_t>(max_request_mb * 1024 * 1024);
  Registry registry(repository, std::move(models), model_control == "explicit");
  Server server(registry, max_request_bytes);
  httplib::Server svr;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(max_request_bytes + (1 << 20));
  // httplib closes a keep-alive connection after 5 requests by default: at 64 clients the reconnects overflowed its
  // listen backlog and clients saw resets (measured); a connection's thread is bound to it anyway
  svr.set_keep_alive_max_count(10000);
  // httplib listens with a backlog of 5 (compiled into Debian's library): 64 clients connecting at once saw
  // resets. The listening socket is taken here and listened on again with the system's maximum after binding.
  int listen_fd = -1;
  bool bound = false;  // the last socket made while binding is the one that bound (earlier addresses may fail)
  svr.set_socket_options([&listen_fd, &bound](socket_t sock) {
    httplib::default_socket_options(sock);
    if (!bound) listen_fd = sock;
  });
  svr.set_tcp_nodelay(true);  // else small responses wait for the client's delayed ACK (40 ms measured)
  server.routes(svr);
  const int port = http_port == 0 ? svr.bind_to_any_port(host) : (svr.bind_to_port(host, http_port) ? http_port : -1);
  if (port < 0) {
    log("error", "cannot listen", {{"host", host}, {"port", std::to_string(http_port)}});
    return 2;
  }
  bound = true;
  if (listen_fd >= 0 && ::listen(listen_fd, SOMAXCONN) != 0) {
    log("warning", "cannot raise the listen backlog", {{"error", std::strerror(errno)}});
  }
  std::unique_ptr<GrpcServer> grpc_server;
  if (grpc_port >= 0) {
    grpc_server = std::make_unique<GrpcServer>(registry, host, grpc_port, max_request_bytes);
    if (grpc_server->port() <= 0) {
      log("error", "cannot listen (gRPC)", {{"host", host}, {"port", std::to_string(grpc_port)}});
      return 2;
    }
  }
  log("info", "listening", {{"host", host}, {"http_port", std::to_string(port)},
                            {"grpc_port", std::to_string(grpc_server ? grpc_server->port() : -1)}});
  std::atomic<bool> listening_ended{false};
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (listening_ended) return;
    log("info", "stopping: no new connections, finishing the requests in flight",
        {{"signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"}, {"bound_seconds", std::to_string(shutdown_seconds)}});
    // past the bound, exit anyway (still 0: the stop was asked for)
    std::thread([shutdown_seconds] {
      std::this_thread::sleep_for(std::chrono::duration<double>(shutdown_seconds));
      log("warning", "requests still in flight after the shutdown bound; exiting");
      std::_Exit(0);
    }).detach();
    svr.stop();  // stops accepting; the worker pool finishes the requests it holds
    if (grpc_server) grpc_server->shutdown(shutdown_seconds);
  });
  const bool ok = svr.listen_after_bind();
  listening_ended = true;
  pthread_kill(stopper.native_handle(), SIGTERM);  // a stop that came from elsewhere: wake the stopper
  stopper.join();
  if (grpc_server) {
    grpc_server->shutdown(0);  // a no-op after the stopper's; else the HTTP side ended on its own
    grpc_server->wait();
  }
  if (!ok) {
    log("error", "the HTTP server stopped with an error");
    return 1;
  }
  log("info", "stopped");
  return 0;
}
