// pt2serve: the models of a repository behind the Open Inference Protocol (KServe v2) over HTTP/REST, JSON tensors
// and the binary tensor data extension. docs/serving.md.
#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <pthread.h>
#include <sys/socket.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <pt2rt/pt2rt.h>

#include "grpc_service.h"
#include "http_infer.h"
#include "log.h"
#include "model.h"
#include "protocol.h"

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
    // Bodies are read by the routes themselves (ContentReader), bounded as they arrive: see read_body.
    svr.Post(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/infer)",
             [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
               handle(res, [&] { infer(req, read_body(req, res, reader), res); });
             });
    // Triton's model repository extension: the index, and (re)loading or unloading a model while serving
    svr.Post("/v2/repository/index", [this](const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& reader) {
      handle(res, [&] {
        const json body = repository_body(read_body(req, res, reader), "repository index");
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
    svr.Post(R"(/v2/repository/models/([^/]+)/load)", [this](const httplib::Request& req, httplib::Response& res,
                                                             const httplib::ContentReader& reader) {
      handle(res, [&] {
        std::vector<std::string> parameters;
        repository_body(read_body(req, res, reader), "load", &parameters);
        registry_.load(req.matches[1], parameters);
        reply(res, 200, json::object());
      });
    });
    svr.Post(R"(/v2/repository/models/([^/]+)/unload)", [this](const httplib::Request& req, httplib::Response& res,
                                                               const httplib::ContentReader& reader) {
      handle(res, [&] {
        std::vector<std::string> parameters;
        repository_body(read_body(req, res, reader), "unload", &parameters);
        registry_.unload(req.matches[1], parameters);
        reply(res, 200, json::object());
      });
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    // Any other request with a body: answered without reading it (else httplib would read it whole, unbounded),
    // and the connection closed, as the unread body is still on it.
    const httplib::Server::HandlerWithContentReader unknown = [](const httplib::Request& req, httplib::Response& res,
                                                                 const httplib::ContentReader&) {
      res.set_header("Connection", "close");
      reply(res, 404, {{"error", clip("no such endpoint: " + req.method + " " + req.path)}});
    };
    svr.Post(".*", unknown).Put(".*", unknown).Patch(".*", unknown).Delete(".*", unknown);
    // errors httplib answers itself (before a route runs) get the protocol's JSON body too
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string what = "HTTP " + std::to_string(res.status);
      if (res.status == 404) what = clip("no such endpoint: " + req.method + " " + req.path);
      if (res.status == 413) what = too_large();
      res.set_content(json{{"error", what}}.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      Failure f{ErrorKind::Internal, "internal error"};
      try {
        std::rethrow_exception(ep);
      } catch (...) {
        f = current_failure();
      }
      reply(res, http_status(f.kind), {{"error", f.message}});
    });
  }

 private:
  static void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  template <typename F>
  static void handle(httplib::Response& res, F&& f) {
    try {
      f();
    } catch (...) {
      const Failure failure = current_failure();
      reply(res, http_status(failure.kind), {{"error", failure.message}});
    }
  }

  std::string too_large() const {
    return "the request body is larger than the limit, " + std::to_string(max_request_bytes_) +
           " bytes (--max-request-mb), once decoded";
  }

  // The body of a request, bounded as it arrives: its decoded bytes (after any Content-Encoding) whatever the
  // framing (Content-Length, chunked, none). Past the limit, or unreadable: TooLarge or BadRequest, and the
  // connection closes, as the rest of the body is never read.
  std::string read_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    if (req.is_multipart_form_data()) {
      res.set_header("Connection", "close");
      throw BadRequest("multipart/form-data bodies are not taken: send application/json or application/octet-stream");
    }
    std::string body;
    if (req.has_header("Content-Length")) {  // a hint only: a compressed body grows
      body.reserve(std::min<size_t>(req.get_header_value<uint64_t>("Content-Length"), max_request_bytes_));
    }
    bool over = false;
    const bool ok = reader([&](const char* data, size_t n) {
      if (n > max_request_bytes_ - body.size()) {
        over = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    if (!ok) {
      res.set_header("Connection", "close");
      if (over || res.status == 413) throw TooLarge(too_large());
      throw BadRequest("the request body could not be read (a broken chunked or Content-Encoding stream, or the "
                       "client stopped sending)");
    }
    return body;
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

  void infer(const httplib::Request& req, const std::string& body, httplib::Response& res) {
    ModelPtr m = find(req, true);
    m->stats().requests++;
    try {
      infer_checked(*m, req, body, res);
    } catch (...) {
      m->stats().failures++;
      throw;
    }
  }

  void infer_checked(Model& m, const httplib::Request& req, const std::string& body_in, httplib::Response& res) {
    const bool has_length = req.has_header(kHeaderLength);
    const std::string length = has_length ? req.get_header_value(kHeaderLength) : "";
    HttpInferRequest parsed = parse_http_infer(m.spec(), body_in, has_length ? &length : nullptr, max_request_bytes_);
    const auto outputs = m.infer(std::move(parsed.inputs));
    const auto& spec = m.spec();
    json out = {{"model_name", m.name()}, {"model_version", m.version()}, {"outputs", json::array()}};
    if (!parsed.id.is_null()) out["id"] = parsed.id;
    std::vector<const pt2rt::Tensor*> binary;  // appended after the JSON, in order
    for (const auto& [i, as_binary] : parsed.outputs) {
      const auto& t = outputs[i];
      json o = {{"name", spec.outputs[i].name}, {"datatype", datatype_name(t.dtype())}, {"shape", t.shape()}};
      if (as_binary) {
        o["parameters"] = {{"binary_data_size", t.nbytes()}};
        binary.push_back(&t);
      } else {
        o["data"] = tensor_to_json(t);
      }
      out["outputs"].push_back(std::move(o));
    }
    std::string body = out.dump(-1, ' ', false, json::error_handler_t::replace);
    res.status = 200;
    if (binary.empty()) {
      res.set_content(body, "application/json");
    } else {
      res.set_header(kHeaderLength, std::to_string(body.size()));
      size_t total = body.size();
      for (const auto* t : binary) total += t->nbytes();
      body.reserve(total);
      for (const auto* t : binary) body.append(static_cast<const char*>(t->data()), t->nbytes());
      res.set_content(body, "application/octet-stream");
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
  static json repository_body(const std::string& text, const char* what,
                              std::vector<std::string>* parameters = nullptr) {
    if (text.empty()) return json::object();
    check_json_depth(text.data(), text.data() + text.size());
    const json body = json::parse(text, nullptr, false);
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

// A PEM file's contents; one that cannot be read, or is empty, throws (an empty one would mean "no TLS" to gRPC).
std::string read_pem(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string text(std::istreambuf_iterator<char>(in), {});
  if (text.empty()) throw std::runtime_error(path + " is empty: expected PEM");
  return text;
}
}  // namespace
}  // namespace pt2serve

int main(int argc, char** argv) {
  using namespace pt2serve;
  CLI::App app{"pt2serve: the models of a repository over the Open Inference Protocol (KServe v2)"};
  std::string repository, host = "127.0.0.1";
  int http_port = 8000, grpc_port = 8001, threads = 64;
  double max_request_mb = 64, shutdown_seconds = 30, poll_seconds = 15;
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
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-request-mb", max_request_mb, "largest request body, once decoded")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 2047.0));  // gRPC's message limit is an int
  app.add_option("--shutdown-seconds", shutdown_seconds, "on SIGTERM, how long in-flight requests may take")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--model-control-mode", model_control,
                 "none: the models loaded at start serve until exit; explicit: POST /v2/repository/models/{m}/load "
                 "and /unload (re)load and unload them while serving; poll: follow the repository folder (new, "
                 "changed and removed models and versions) every --repository-poll-secs")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "explicit", "poll"}));
  app.add_option("--repository-poll-secs", poll_seconds, "how often --model-control-mode poll reads the repository")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  std::string tls_cert, tls_key, tls_client_ca;
  auto* cert_opt = app.add_option("--tls-cert", tls_cert, "PEM certificate (chain): HTTPS and gRPC over TLS")
                       ->check(CLI::ExistingFile);
  auto* key_opt = app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  cert_opt->needs(key_opt);
  key_opt->needs(cert_opt);
  app.add_option("--tls-client-ca", tls_client_ca,
                 "PEM CA certificates: clients must present a certificate one of them signed (mutual TLS)")
      ->check(CLI::ExistingFile)
      ->needs(cert_opt);
  app.set_version_flag("--version", std::string("pt2serve ") + PT2SERVE_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // --help and --version: 0
    return code == 0 ? 0 : 2;
  }
  // SIGTERM and SIGINT are taken by one thread (sigwait): blocked here, before any other thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // TLS first: a bad certificate stops the start before any model loads
  TlsPem tls;
  if (!tls_cert.empty()) {
    try {
      tls = {read_pem(tls_cert), read_pem(tls_key), tls_client_ca.empty() ? "" : read_pem(tls_client_ca)};
    } catch (const std::exception& e) {
      log("error", e.what());
      return 2;
    }
  }
  std::unique_ptr<httplib::Server> http;
  if (tls_cert.empty()) {
    http = std::make_unique<httplib::Server>();
  } else {
    auto https = std::make_unique<httplib::SSLServer>(tls_cert.c_str(), tls_key.c_str(),
                                                      tls_client_ca.empty() ? nullptr : tls_client_ca.c_str());
    if (!https->is_valid()) {
      log("error", "cannot use the TLS certificate and key (not PEM, or the key is not the certificate's)",
          {{"tls_cert", tls_cert}, {"tls_key", tls_key}, {"tls_client_ca", tls_client_ca}});
      return 2;
    }
    http = std::move(https);
  }
  httplib::Server& svr = *http;
  const ModelControl control = model_control == "explicit" ? ModelControl::Explicit
                               : model_control == "poll"   ? ModelControl::Poll
                                                           : ModelControl::None;
  std::vector<ModelPtr> models;
  try {
    if (control != ModelControl::Poll) {
      models = load_repository(repository);
    } else if (!std::filesystem::is_directory(repository)) {
      throw std::runtime_error("model repository " + repository + " is not a directory");
    }
  } catch (const std::exception& e) {
    log("error", e.what());
    return 2;
  }
  const size_t max_request_bytes = static_cast<size_t>(max_request_mb * 1024 * 1024);
  Registry registry(repository, std::move(models), control);
  if (control == ModelControl::Poll) registry.poll();  // the first poll loads every model
  Server server(registry, max_request_bytes);
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
    grpc_server = std::make_unique<GrpcServer>(registry, host, grpc_port, max_request_bytes, tls);
    if (grpc_server->port() <= 0) {
      log("error", "cannot listen (gRPC)", {{"host", host}, {"port", std::to_string(grpc_port)}});
      return 2;
    }
  }
  std::mutex poll_mu;
  std::condition_variable poll_cv;
  bool poll_stop = false;
  std::thread poller;
  if (control == ModelControl::Poll) {
    poller = std::thread([&] {
      std::unique_lock<std::mutex> lock(poll_mu);
      while (!poll_cv.wait_for(lock, std::chrono::duration<double>(poll_seconds), [&] { return poll_stop; })) {
        lock.unlock();
        registry.poll();
        lock.lock();
      }
    });
  }
  log("info", "listening", {{"host", host}, {"http_port", std::to_string(port)},
                            {"grpc_port", std::to_string(grpc_server ? grpc_server->port() : -1)},
                            {"tls", tls_cert.empty() ? "off" : tls_client_ca.empty() ? "on" : "mutual"}});
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
  if (poller.joinable()) {  // a poll in progress finishes its load first
    {
      std::lock_guard<std::mutex> lock(poll_mu);
      poll_stop = true;
    }
    poll_cv.notify_all();
    poller.join();
  }
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
