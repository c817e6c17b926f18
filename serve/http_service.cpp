#include "http_service.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <malloc.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/thread.h>
#include <nlohmann/json.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pt2rt/pt2rt.h>

#include "http_codec.h"
#include "http_infer.h"
#include "log.h"
#include "protocol.h"

using nlohmann::json;

namespace pt2serve {
namespace {

constexpr const char* kVersion = PT2SERVE_VERSION;
constexpr const char* kHeaderLength = "Inference-Header-Content-Length";
// a request's line and headers together, at most: a client that sends more is answered 400 and closed
constexpr size_t kMaxHeaderBytes = 64 * 1024;
// bytes written to a connection per loop iteration, at most
constexpr size_t kMaxSingleWrite = size_t{4} << 20;
// bodies from this size up are followed by malloc_trim
constexpr size_t kTrimFrom = size_t{4} << 20;
// responses smaller than this go out uncompressed even when the client accepts gzip
constexpr size_t kCompressFrom = 1024;
// an idle server answers an inference on its loop thread, skipping the hand-off to a worker and back (~25 us),
// when the model does not batch, its recent requests took less than this, and the body is no larger than below
constexpr uint64_t kInlineUnderNs = 200'000;
constexpr size_t kInlineMaxBody = 64 * 1024;
// a batching model's request with a body up to this size is parsed on the loop and queued for the batcher from there
// (two hand-offs fewer); larger ones go through a worker, which also writes their answer off the batcher's thread
constexpr size_t kBatchFromLoopMaxBody = 16 * 1024;
// past max_buffered_bytes a connection is closed only when it holds at least this much: small requests (health
// probes, metadata) go on while the bound is reached, and closing them would free next to nothing
constexpr size_t kClosableFrom = 64 * 1024;

json tensor_metadata(const pt2rt::TensorSpec& t) {
  return {{"name", t.name}, {"datatype", datatype_name(t.dtype)}, {"shape", t.shape}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 413: return "Payload Too Large";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error";
  }
}

// What a worker needs of a request, taken off libevent's structures on the loop thread.
struct Request {
  evhttp_request* req = nullptr;  // the loop's; a worker never touches it
  bool get = false, post = false;
  std::string method, path;
  std::vector<std::string> segments;  // the path's, percent-decoded
  std::string content_encoding, accept_encoding, content_type, header_length;
  bool has_header_length = false;
  evbuffer* body = nullptr;  // the body's bytes, moved out of the connection's buffer
  size_t counted = 0;        // of them, what counts against max_buffered_bytes until the body is released
  std::optional<HttpInferRequest> parsed;  // an inference the loop has parsed already (body then null)
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;
};

Response json_response(int status, const json& body) {
  Response r;
  r.status = status;
  r.body = dump(body);
  return r;
}

std::string header(evkeyvalq* headers, const char* name, bool* found = nullptr) {
  const char* v = evhttp_find_header(headers, name);
  if (found) *found = v != nullptr;
  return v ? v : "";
}

std::vector<std::string> split_path(const char* path) {
  std::vector<std::string> segments;
  if (!path || *path != '/') return segments;
  std::string_view rest(path + 1);
  while (true) {
    const size_t slash = rest.find('/');
    const std::string raw(rest.substr(0, slash));
    size_t n = 0;
    char* decoded = evhttp_uridecode(raw.c_str(), 0, &n);
    segments.emplace_back(decoded ? std::string(decoded, n) : raw);
    free(decoded);
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return segments;
}

// A repository request's JSON body (may be empty) and the names of its parameters (the registry judges them).
json repository_body(const std::string& text, const char* what, std::vector<std::string>* parameters = nullptr) {
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

// The endpoints that touch models, run on the worker threads.
class Handlers {
 public:
  Handlers(Registry& registry, size_t max_request_bytes) : registry_(registry), max_request_bytes_(max_request_bytes) {}

  // The model of an uncompressed inference with a body of at most kInlineMaxBody - the requests the loop may take
  // on itself (quick, parse_for_batch) - or null: a worker takes the request as it is (and answers any error).
  ModelPtr small_inference(const Request& r) {
    const auto& s = r.segments;
    const bool versioned = s.size() == 6 && s[3] == "versions";
    if (!r.post || s.size() != (versioned ? 6u : 4u) || s[0] != "v2" || s[1] != "models" || s.back() != "infer" ||
        !r.content_encoding.empty() || !r.body || evbuffer_get_length(r.body) > kInlineMaxBody) {
      return nullptr;
    }
    try {
      return registry_.find(s[2], versioned ? s[4] : "", true);
    } catch (...) {
      return nullptr;
    }
  }

  // Whether the loop may answer a small inference of `m` itself (see kInlineUnderNs): the model does not batch and
  // was quick the last times; a request that runs long on the loop delays the other connections.
  static bool quick(Model& m) {
    const uint64_t recent = m.stats().recent_request_ns.load(std::memory_order_relaxed);
    return !m.batching() && recent > 0 && recent < kInlineUnderNs;
  }

  Response handle(Request& r) {
    Response res;
    try {
      res = route(r);
    } catch (...) {
      res = failure_response();
    }
    finish(res, r.accept_encoding);
    return res;
  }

  // The exception being handled as the client is told it.
  static Response failure_response() {
    const Failure f = current_failure();
    return json_response(http_status(f.kind), {{"error", f.message}});
  }

  // Compresses a text answer the client accepts compressed.
  static void finish(Response& res, const std::string& accept_encoding) {
    const bool text = res.content_type == "application/json" || res.content_type.rfind("text/", 0) == 0;
    if (text && res.body.size() >= kCompressFrom && res.body.size() < (1u << 30) && !accept_encoding.empty()) {
      const std::string coding = response_coding(accept_encoding);
      if (!coding.empty()) {
        res.body = encode_body(coding, res.body);
        res.headers.emplace_back("Content-Encoding", coding);
        res.headers.emplace_back("Vary", "Accept-Encoding");
      }
    }
  }

  // Parses a small inference of a batching model on the loop (a body up to kBatchFromLoopMaxBody), so that the loop
  // queues it for the batcher itself: parsing takes microseconds, and the batcher's completion answers through the
  // loop - no worker between. False when a worker should take the request as it is; a malformed body throws as the
  // worker would.
  bool parse_for_batch(Model& m, Request& r) {
    if (!m.batching() || !m.ready() || evbuffer_get_length(r.body) > kBatchFromLoopMaxBody) return false;
    m.stats().requests++;
    try {
      r.parsed = parse_infer(m, r);
    } catch (...) {
      m.stats().failures++;
      throw;
    }
    return true;
  }

  // The answer to a parsed inference once the model has run it.
  Response respond(Model& m, const HttpInferRequest& parsed, const std::vector<pt2rt::Tensor>& outputs) {
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
    Response res;
    res.body = dump(out);
    if (!binary.empty()) {
      res.headers.emplace_back(kHeaderLength, std::to_string(res.body.size()));
      size_t total = res.body.size();
      for (const auto* t : binary) total += t->nbytes();
      res.body.reserve(total);
      for (const auto* t : binary) res.body.append(static_cast<const char*>(t->data()), t->nbytes());
      res.content_type = "application/octet-stream";
    }
    return res;
  }

 private:
  Response route(Request& r) {
    const auto& s = r.segments;
    const size_t n = s.size();
    if (n >= 3 && s[0] == "v2" && s[1] == "models" && !s[2].empty()) {
      // /v2/models/{m}[/versions/{v}][/ready|/infer]
      const bool versioned = n >= 5 && s[3] == "versions" && !s[4].empty();
      const size_t base = versioned ? 5 : 3;
      const std::string version = versioned ? s[4] : "";
      if (n == base && r.get) return metadata(registry_.find(s[2], version, true));
      if (n == base + 1 && s[base] == "ready" && r.get) {
        ModelPtr m = registry_.find(s[2], version, false);
        if (!m->ready()) return json_response(400, {{"error", "model " + m->name() + " is not ready: " + m->load_error()}});
        Response ok;
        ok.content_type.clear();
        return ok;
      }
      if (n == base + 1 && s[base] == "infer" && r.post) return infer(registry_.find(s[2], version, true), r);
    }
    if (n == 3 && s[0] == "v2" && s[1] == "repository" && s[2] == "index" && r.post) {
      const json body = repository_body(std::string(read_body(r).view()), "repository index");
      if (body.contains("ready") && !body["ready"].is_boolean()) {
        throw BadRequest("repository index: 'ready' must be true or false");
      }
      json index = json::array();
      for (const auto& e : registry_.index(body.value("ready", false))) {
        json entry = {{"name", e.name}, {"version", e.version}, {"state", e.state}};
        if (!e.reason.empty()) entry["reason"] = e.reason;
        index.push_back(entry);
      }
      return json_response(200, index);
    }
    if (n == 5 && s[0] == "v2" && s[1] == "repository" && s[2] == "models" && (s[4] == "load" || s[4] == "unload") &&
        r.post) {
      std::vector<std::string> parameters;
      repository_body(std::string(read_body(r).view()), s[4].c_str(), &parameters);
      if (s[4] == "load") {
        registry_.load(s[3], parameters);
      } else {
        registry_.unload(s[3], parameters);
      }
      return json_response(200, json::object());
    }
    if (n == 1 && s[0] == "metrics" && r.get) {
      Response res;
      res.content_type = "text/plain; version=0.0.4";
      res.body = metrics();
      return res;
    }
    throw NotFound(clip("no such endpoint: " + r.method + " " + r.path));
  }

  // A request's body as received, in one piece, or decoded from its Content-Encoding.
  struct Body {
    std::unique_ptr<char[]> raw;  // not zeroed first: its pages are touched once, by the copy
    size_t size = 0;
    std::string decoded;
    bool is_decoded = false;
    std::string_view view() const { return is_decoded ? std::string_view(decoded) : std::string_view(raw.get(), size); }
  };

  // The body, decoded: its decoded bytes bounded as they inflate (the bytes sent were bounded as they came).
  Body read_body(Request& r) {
    if (r.content_type.rfind("multipart/form-data", 0) == 0) {
      throw BadRequest("multipart/form-data bodies are not taken: send application/json or application/octet-stream");
    }
    Body body;
    body.size = r.body ? evbuffer_get_length(r.body) : 0;
    body.raw.reset(new char[body.size + 1]);
    // the connection's buffer is freed piece by piece as it is copied: the body is held once, not twice
    if (body.size > 0) evbuffer_remove(r.body, body.raw.get(), body.size);
    // those pieces were allocated by the loop thread, in its malloc arena: give them back to the system rather than
    // keep a large body's worth resident beside what parsing it takes here (57 MB measured)
    if (body.size >= kTrimFrom) malloc_trim(0);
    if (!r.content_encoding.empty()) {
      body.decoded = decode_body(r.content_encoding, body.view(), max_request_bytes_);
      body.is_decoded = true;
      body.raw.reset();
    } else if (body.size > max_request_bytes_) {
      throw TooLarge("the request body is larger than the limit, " + std::to_string(max_request_bytes_) +
                     " bytes (--max-request-mb), once decoded");
    }
    return body;
  }

  Response metadata(const ModelPtr& m) {
    json inputs = json::array(), outputs = json::array();
    for (const auto& t : m->spec().inputs) inputs.push_back(tensor_metadata(t));
    for (const auto& t : m->spec().outputs) outputs.push_back(tensor_metadata(t));
    return json_response(200, {{"name", m->name()}, {"versions", registry_.versions(m->name())}, {"platform", "pt2rt"},
                               {"inputs", inputs}, {"outputs", outputs}});
  }

  Response infer(const ModelPtr& m, Request& r) {
    if (!r.parsed) m->stats().requests++;  // else counted by parse_for_batch()
    try {
      const auto start = std::chrono::steady_clock::now();
      Response res = infer_checked(*m, r);
      const auto took = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
      auto& recent = m->stats().recent_request_ns;
      const uint64_t before = recent.load(std::memory_order_relaxed);
      recent.store(before == 0 ? took : (before * 3 + took) / 4, std::memory_order_relaxed);  // races lose a sample
      return res;
    } catch (...) {
      m->stats().failures++;
      throw;
    }
  }

  HttpInferRequest parse_infer(Model& m, Request& r) {
    const Body body = read_body(r);  // freed once parsed: the inputs hold their own copies
    return parse_http_infer(m.spec(), body.view(), r.has_header_length ? &r.header_length : nullptr,
                            max_request_bytes_);
  }

  Response infer_checked(Model& m, Request& r) {
    HttpInferRequest parsed = r.parsed ? std::move(*r.parsed) : parse_infer(m, r);
    const auto outputs = m.infer(std::move(parsed.inputs));
    return respond(m, parsed, outputs);
  }

  // A label value as Prometheus' text format writes it: backslash, double quote and newline escaped.
  static std::string label(const std::string& value) {
    std::string out;
    for (const char c : value) {
      if (c == '\\' || c == '"') out += '\\';
      out += c == '\n' ? std::string("\\n") : std::string(1, c);
    }
    return out;
  }

  std::string metrics() {
    std::string s;
    const auto family = [&](const char* name, const char* type, const char* help, auto value) {
      s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
      for (auto& m : registry_.models()) {
        s += std::string(name) + "{model=\"" + label(m->name()) + "\",version=\"" + label(m->version()) + "\"} " +
             value(*m) + "\n";
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
      const std::string labels = "model=\"" + label(m->name()) + "\",version=\"" + label(m->version()) + "\"";
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

  Registry& registry_;
  size_t max_request_bytes_;
};

std::string ssl_error() {
  const unsigned long e = ERR_get_error();
  char text[256] = "unknown error";
  if (e) ERR_error_string_n(e, text, sizeof text);
  ERR_clear_error();
  return text;
}

SSL_CTX* make_tls_context(const std::string& cert, const std::string& key, const std::string& client_ca) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) throw std::runtime_error("OpenSSL: " + ssl_error());
  try {
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
      throw std::runtime_error("cannot use the TLS certificate and key (not PEM, or the key is not the "
                               "certificate's): " + ssl_error());
    }
    if (!client_ca.empty()) {
      STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(client_ca.c_str());
      if (!names || SSL_CTX_load_verify_locations(ctx, client_ca.c_str(), nullptr) != 1) {
        if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
        throw std::runtime_error("cannot use the TLS client CA file (not PEM certificates): " + ssl_error());
      }
      SSL_CTX_set_client_CA_list(ctx, names);
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
  } catch (...) {
    SSL_CTX_free(ctx);
    throw;
  }
  return ctx;
}

}  // namespace

struct HttpService::Impl {
  Impl(Registry& registry, HttpOptions options) : options(std::move(options)), handlers(registry, this->options.max_request_bytes) {}

  HttpOptions options;
  Handlers handlers;
  event_base* base = nullptr;
  evhttp* http = nullptr;
  evhttp_bound_socket* bound = nullptr;
  event* wake = nullptr;          // workers' answers are ready
  event* stop_event = nullptr;    // stop() was called
  event* accept_retry = nullptr;  // accepting paused (out of file descriptors)
  SSL_CTX* ssl = nullptr;
  int port = -1;
  bool stopping = false;  // loop thread only
  size_t in_flight = 0;   // loop thread only: requests handed to workers, not yet answered
  // The request bytes held (HttpOptions::max_buffered_bytes): per connection (by socket), what it has sent since its
  // last request was taken - loop thread only; and the bodies taken, until released - any thread.
  struct Receiving {
    bufferevent* bev = nullptr;
    ino_t socket = 0;  // the socket's inode: a descriptor closed and reused holds another
    size_t held = 0;
    bool closed = false;  // closed for memory: what it still sends does not count
  };
  std::vector<Receiving> receiving;  // by file descriptor
  size_t receiving_bytes = 0;
  std::atomic<size_t> queued_bytes{0};
  std::chrono::steady_clock::time_point last_memory_warning{};
  std::unordered_set<evhttp_connection*> unsent;  // loop thread only: connections writing an answer
  std::chrono::steady_clock::time_point last_accept_warning{};

  // Requests for the workers, answers for the loop. The worker idle for the shortest time takes the next request
  // (a stack, not a queue): under light load one thread stays hot, with its intra-op thread team (OpenMP keeps one
  // per calling thread) and the caches of the model it ran last, instead of requests going round 64 threads.
  struct Worker {
    std::condition_variable cv;
    std::optional<Request> job;
  };
  std::mutex mu;
  std::vector<std::unique_ptr<Worker>> pool;
  std::vector<Worker*> idle;   // most recently idle last
  std::deque<Request> backlog;  // when every worker is busy
  std::vector<std::pair<evhttp_request*, Response>> done;
  bool workers_stop = false;
  std::vector<std::thread> workers;
  size_t queued_for_batch = 0;  // requests with a model's batcher whose answer is not in `done` yet
  std::condition_variable drained;

  void start() {
    static const int threads_ready = evthread_use_pthreads();  // before any event_base: cross-thread event_active
    if (threads_ready != 0) throw std::runtime_error("libevent: no pthreads support");
    base = event_base_new();
    http = base ? evhttp_new(base) : nullptr;
    if (!http) throw std::runtime_error("libevent: cannot create the HTTP server");
    if (!options.tls_cert.empty()) ssl = make_tls_context(options.tls_cert, options.tls_key, options.tls_client_ca);
    evhttp_set_bevcb(http, &Impl::new_bufferevent, this);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                         EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
    evhttp_set_max_headers_size(http, kMaxHeaderBytes);
    // the body as sent (compressed or not): a compressed body is at most a little larger than its decoded bytes
    const size_t max = options.max_request_bytes;
    evhttp_set_max_body_size(http, static_cast<ev_ssize_t>(max + max / 64 + 4096));
    if (options.max_buffered_bytes < max) throw std::runtime_error("max_buffered_bytes is below max_request_bytes");
    evhttp_set_timeout(http, options.idle_timeout_seconds);
    evhttp_set_gencb(http, &Impl::on_request, this);
    bound = evhttp_bind_socket_with_handle(http, options.host.c_str(), static_cast<uint16_t>(options.port));
    if (!bound) throw std::runtime_error("cannot listen on " + options.host + ":" + std::to_string(options.port));
    const int fd = evhttp_bound_socket_get_fd(bound);
    // libevent listens with a backlog of 128; a burst of clients connecting at once needs the system's maximum
    if (::listen(fd, SOMAXCONN) != 0) log("warning", "cannot raise the listen backlog", {{"error", std::strerror(errno)}});
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    }
    evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(bound), &Impl::on_accept_error);
    wake = event_new(base, -1, EV_PERSIST, &Impl::on_wake, this);
    stop_event = event_new(base, -1, 0, &Impl::on_stop, this);
    accept_retry = evtimer_new(base, &Impl::on_accept_retry, this);
    if (!wake || !stop_event || !accept_retry || event_add(wake, nullptr) != 0) {
      throw std::runtime_error("libevent: cannot create events");
    }
    for (size_t i = 0; i < options.workers; ++i) {
      pool.push_back(std::make_unique<Worker>());
      workers.emplace_back([this, w = pool.back().get()] { work(*w); });
    }
  }

  // Each connection's bufferevent (as evhttp makes it, or over TLS), its input counted as it arrives.
  static bufferevent* new_bufferevent(event_base* base, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    bufferevent* bev = nullptr;
    if (self->ssl) {
      SSL* s = SSL_new(self->ssl);
      if (!s) return nullptr;
      bev = bufferevent_openssl_socket_new(base, -1, s, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
      if (bev) bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);  // clients that close without close_notify
    } else {
      bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    // the callback runs on the loop thread (loop_owner), as long as the buffer lives
    if (bev) evbuffer_add_cb(bufferevent_get_input(bev), &Impl::on_input, bev);
    return bev;
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      workers_stop = true;
    }
    for (auto& w : pool) w->cv.notify_all();
    for (auto& t : workers) t.join();
    {
      // a completion still to come would use this object: the models finish what they queued
      std::unique_lock<std::mutex> lock(mu);
      drained.wait(lock, [&] { return queued_for_batch == 0; });
    }
    for (auto& j : backlog) {
      if (j.body) evbuffer_free(j.body);
    }
    if (accept_retry) event_free(accept_retry);
    if (stop_event) event_free(stop_event);
    if (wake) event_free(wake);
    if (http) evhttp_free(http);  // closes the connections still open
    if (base) event_base_free(base);
    if (ssl) SSL_CTX_free(ssl);
  }

  // Sends an answer; until it is written (or its connection is gone) a stop waits for it.
  void send(evhttp_request* req, Response& res) {
    if (evhttp_connection* conn = evhttp_request_get_connection(req)) {
      unsent.insert(conn);
      evhttp_request_set_on_complete_cb(req, &Impl::on_sent, this);
      evhttp_connection_set_closecb(conn, &Impl::on_closed, this);
    }
    evkeyvalq* out = evhttp_request_get_output_headers(req);
    if (!res.content_type.empty()) evhttp_add_header(out, "Content-Type", res.content_type.c_str());
    for (const auto& [k, v] : res.headers) evhttp_add_header(out, k.c_str(), v.c_str());
    if (res.close) evhttp_add_header(out, "Connection", "close");
    evbuffer* buf = evbuffer_new();
    if (buf && !res.body.empty()) {
      // the body's bytes go out as they are: the buffer references the string until it is sent
      auto* owned = new std::string(std::move(res.body));
      if (evbuffer_add_reference(buf, owned->data(), owned->size(),
                                 [](const void*, size_t, void* p) { delete static_cast<std::string*>(p); }, owned) != 0) {
        delete owned;
      }
    }
    evhttp_send_reply(req, res.status, reason(res.status), buf);
    if (buf) evbuffer_free(buf);
  }

  static void on_sent(evhttp_request* req, void* arg) {
    static_cast<Impl*>(arg)->written(evhttp_request_get_connection(req));
  }
  static void on_closed(evhttp_connection* conn, void* arg) { static_cast<Impl*>(arg)->written(conn); }
  void written(evhttp_connection* conn) {
    unsent.erase(conn);
    exit_if_stopped();
  }
  void exit_if_stopped() {
    if (stopping && in_flight == 0 && unsent.empty()) event_base_loopexit(base, nullptr);
  }

  static void on_request(evhttp_request* req, void* arg) { static_cast<Impl*>(arg)->request(req); }

  static thread_local Impl* loop_owner;  // the Impl whose loop runs on this thread

  static void on_input(evbuffer*, const evbuffer_cb_info* info, void* arg) {
    if (info->n_added == 0 || !loop_owner) return;
    auto* bev = static_cast<bufferevent*>(arg);
    const evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd >= 0) loop_owner->received(bev, static_cast<size_t>(fd), info->n_added);
  }

  static ino_t socket_inode(size_t fd) {
    struct stat st {};
    return fstat(static_cast<int>(fd), &st) == 0 ? st.st_ino : 0;
  }

  void received(bufferevent* bev, size_t fd, size_t n) {
    if (fd >= receiving.size()) receiving.resize(fd + 1);
    Receiving& c = receiving[fd];
    // a new connection on this descriptor: libevent may give it the address of a bufferevent freed just before
    // (the socket's inode tells them apart), and its bytes then counted as the closed one's, or not at all
    const ino_t socket = socket_inode(fd);
    if (c.bev != bev || c.socket != socket) {
      forget(c);
      c = Receiving{bev, socket};
    }
    if (c.closed) return;
    c.held += n;
    receiving_bytes += n;
    if (receiving_bytes + queued_bytes.load(std::memory_order_relaxed) > options.max_buffered_bytes) over_bound();
  }

  void forget(Receiving& c) {
    receiving_bytes -= c.held;
    c.held = 0;
  }

  // Past max_buffered_bytes: what connections closed since (by their clients or a timeout) left counted is
  // dropped; then, while still past it, the connection that has sent the most (at least kClosableFrom) is closed,
  // unanswered.
  void over_bound() {
    for (size_t fd = 0; fd < receiving.size(); ++fd) {
      Receiving& c = receiving[fd];
      if ((c.held > 0 || c.closed) && socket_inode(fd) != c.socket) {
        forget(c);
        c = Receiving{};
      }
    }
    while (receiving_bytes + queued_bytes.load(std::memory_order_relaxed) > options.max_buffered_bytes) {
      auto largest = std::max_element(receiving.begin(), receiving.end(),
                                      [](const Receiving& a, const Receiving& b) { return a.held < b.held; });
      if (largest == receiving.end() || largest->held < kClosableFrom) return;  // the rest: bodies with workers
      const auto fd = static_cast<int>(largest - receiving.begin());
      const auto now = std::chrono::steady_clock::now();
      if (now - last_memory_warning > std::chrono::seconds(10)) {
        last_memory_warning = now;
        log("warning", "closing a connection: the request bytes held would pass --max-buffered-mb",
            {{"connection_bytes", std::to_string(largest->held)},
             {"limit_bytes", std::to_string(options.max_buffered_bytes)}});
      }
      ::shutdown(fd, SHUT_RDWR);  // libevent sees the end of the stream and frees the connection
      forget(*largest);
      largest->closed = true;
    }
  }

  // A complete request: what its connection sent no longer counts as being received (its body, once taken,
  // counts as queued until released).
  void received_whole(bufferevent* bev) {
    const evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0 && static_cast<size_t>(fd) < receiving.size() && receiving[fd].bev == bev) forget(receiving[fd]);
  }

  void release_body(Request& r) {
    if (r.body) evbuffer_free(r.body);
    r.body = nullptr;
    queued_bytes -= r.counted;
    r.counted = 0;
  }

  void request(evhttp_request* req) {
    // else a small answer waits for the client's delayed ACK (40 ms measured)
    if (evhttp_connection* conn = evhttp_request_get_connection(req)) {
      bufferevent* bev = evhttp_connection_get_bufferevent(conn);
      received_whole(bev);
      const evutil_socket_t fd = bufferevent_getfd(bev);
      const int on = 1;
      if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      // libevent writes 16 KB per loop iteration by default: an answer goes out in as few writes as the socket takes
      bufferevent_set_max_single_write(bev, kMaxSingleWrite);
    }
    const evhttp_cmd_type cmd = evhttp_request_get_command(req);
    Request r;
    r.req = req;
    r.get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    r.post = cmd == EVHTTP_REQ_POST;
    r.method = cmd == EVHTTP_REQ_GET ? "GET" : cmd == EVHTTP_REQ_HEAD ? "HEAD" : cmd == EVHTTP_REQ_POST ? "POST"
             : cmd == EVHTTP_REQ_PUT ? "PUT" : cmd == EVHTTP_REQ_DELETE ? "DELETE" : cmd == EVHTTP_REQ_PATCH ? "PATCH"
             : "OPTIONS";
    const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
    const char* path = uri ? evhttp_uri_get_path(uri) : nullptr;
    r.path = path ? path : "";
    if (stopping) {
      Response res = json_response(503, {{"error", "the server is stopping"}});
      res.close = true;
      send(req, res);
      return;
    }
    r.segments = split_path(path);
    // answered here, at once, whatever the workers are doing: probes must pass while models are busy
    if (r.get && r.segments.size() == 3 && r.segments[0] == "v2" && r.segments[1] == "health" &&
        (r.segments[2] == "live" || r.segments[2] == "ready")) {
      Response res;
      res.content_type.clear();
      send(req, res);
      return;
    }
    if (r.get && r.segments.size() == 1 && r.segments[0] == "v2") {
      Response res = json_response(200, {{"name", "pt2serve"}, {"version", kVersion},
                                         {"extensions", {"binary_tensor_data", "model_repository"}}});
      send(req, res);
      return;
    }
    evkeyvalq* in = evhttp_request_get_input_headers(req);
    r.content_encoding = header(in, "Content-Encoding");
    r.accept_encoding = header(in, "Accept-Encoding");
    r.content_type = header(in, "Content-Type");
    r.header_length = header(in, kHeaderLength, &r.has_header_length);
    evbuffer* input = evhttp_request_get_input_buffer(req);
    if (evbuffer_get_length(input) > 0) {
      r.body = evbuffer_new();
      if (!r.body || evbuffer_add_buffer(r.body, input) != 0) {  // moves the chain, copies nothing
        if (r.body) evbuffer_free(r.body);
        Response res = json_response(503, {{"error", "out of memory for this request"}});
        send(req, res);
        return;
      }
      r.counted = evbuffer_get_length(r.body);
      queued_bytes += r.counted;
    }
    if (ModelPtr m = handlers.small_inference(r)) {
      if (in_flight == 0 && Handlers::quick(*m)) {
        Response res = handlers.handle(r);
        release_body(r);
        send(req, res);
        return;
      }
      try {
        if (handlers.parse_for_batch(*m, r)) {
          release_body(r);
          if (queue_for_batch(*m, r)) return;
        }
      } catch (...) {
        Response res = Handlers::failure_response();
        Handlers::finish(res, r.accept_encoding);
        release_body(r);
        send(req, res);
        return;
      }
    }
    ++in_flight;
    std::lock_guard<std::mutex> lock(mu);
    if (idle.empty()) {
      backlog.push_back(std::move(r));
      return;
    }
    Worker* w = idle.back();
    idle.pop_back();
    w->job = std::move(r);
    w->cv.notify_one();
  }

  // Queues a parsed inference for the model's batcher, its answer sent from the batcher's completion. False when
  // the request cannot join a batch (a worker runs it); throws Unavailable (the queue is full).
  bool queue_for_batch(Model& m, Request& r) {
    auto asked = std::make_shared<HttpInferRequest>();  // what the answer needs of the request
    asked->outputs = std::move(r.parsed->outputs);
    asked->id = std::move(r.parsed->id);
    evhttp_request* req = r.req;
    Model::Completion complete = [this, model = &m, asked, req, accept = r.accept_encoding](
                                 std::vector<pt2rt::Tensor>* outputs, std::exception_ptr failure) {
      // a model outlives its queued requests (its destructor drains them): a plain pointer, as a ModelPtr dropped
      // here could be the last one and join this very thread
      Response res;
      try {
        if (!outputs) std::rethrow_exception(failure);
        res = handlers.respond(*model, *asked, *outputs);
      } catch (...) {
        model->stats().failures++;
        res = Handlers::failure_response();
      }
      Handlers::finish(res, accept);
      std::lock_guard<std::mutex> lock(mu);
      done.emplace_back(req, std::move(res));
      --queued_for_batch;
      event_active(wake, EV_READ, 0);
      drained.notify_all();
    };
    {
      std::lock_guard<std::mutex> lock(mu);
      ++queued_for_batch;
    }
    bool queued = false;
    try {
      queued = m.submit(r.parsed->inputs, std::move(complete));
    } catch (...) {  // a bad input (checked alone) or a full queue: answered by the caller, counted here
      m.stats().failures++;
      std::lock_guard<std::mutex> lock(mu);
      --queued_for_batch;
      throw;
    }
    if (queued) {
      ++in_flight;
      return true;
    }
    std::lock_guard<std::mutex> lock(mu);
    --queued_for_batch;
    r.parsed->outputs = std::move(asked->outputs);
    r.parsed->id = std::move(asked->id);
    return false;
  }

  void work(Worker& self) {
    while (true) {
      Request r;
      {
        std::unique_lock<std::mutex> lock(mu);
        if (!backlog.empty()) {
          r = std::move(backlog.front());
          backlog.pop_front();
        } else {
          idle.push_back(&self);
          self.cv.wait(lock, [&] { return workers_stop || self.job.has_value(); });
          if (!self.job) return;  // stopping: idle workers are no longer listed
          r = std::move(*self.job);
          self.job.reset();
        }
      }
      Response res = handlers.handle(r);
      release_body(r);
      {
        std::lock_guard<std::mutex> lock(mu);
        done.emplace_back(r.req, std::move(res));
      }
      event_active(wake, EV_READ, 0);
    }
  }

  static void on_wake(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    std::vector<std::pair<evhttp_request*, Response>> ready;
    {
      std::lock_guard<std::mutex> lock(self->mu);
      ready.swap(self->done);
    }
    for (auto& [req, res] : ready) {
      self->send(req, res);  // a request whose client left is freed by libevent here
      --self->in_flight;
    }
    self->exit_if_stopped();
  }

  static void on_stop(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    if (self->stopping) return;
    self->stopping = true;
    if (self->bound) {
      evhttp_del_accept_socket(self->http, self->bound);  // closes the listening socket
      self->bound = nullptr;
    }
    self->exit_if_stopped();
  }

  // Out of file descriptors (or another accept error): pause accepting for a moment instead of spinning on the
  // listening socket, which stays readable.
  static void on_accept_error(evconnlistener* listener, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    const int err = EVUTIL_SOCKET_ERROR();
    const auto now = std::chrono::steady_clock::now();
    if (now - self->last_accept_warning > std::chrono::seconds(10)) {
      self->last_accept_warning = now;
      log("warning", "cannot accept connections; pausing accepts for 100 ms",
          {{"error", evutil_socket_error_to_string(err)}});
    }
    evconnlistener_disable(listener);
    const timeval pause{0, 100 * 1000};
    evtimer_add(self->accept_retry, &pause);
  }

  static void on_accept_retry(evutil_socket_t, short, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    if (self->bound) evconnlistener_enable(evhttp_bound_socket_get_listener(self->bound));
  }
};

thread_local HttpService::Impl* HttpService::Impl::loop_owner = nullptr;

HttpService::HttpService(Registry& registry, HttpOptions options)
    : impl_(std::make_unique<Impl>(registry, std::move(options))) {
  impl_->start();
}

HttpService::~HttpService() = default;

void HttpService::check_tls(const std::string& cert, const std::string& key, const std::string& client_ca) {
  SSL_CTX_free(make_tls_context(cert, key, client_ca));
}

int HttpService::port() const { return impl_->port; }

bool HttpService::run() {
  Impl::loop_owner = impl_.get();
  // the loop runs on with no connection open (requests may still be with the workers) until stop()
  return event_base_loop(impl_->base, EVLOOP_NO_EXIT_ON_EMPTY) == 0;
}

void HttpService::stop() { event_active(impl_->stop_event, EV_READ, 0); }

}  // namespace pt2serve
