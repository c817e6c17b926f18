#include "http_api.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <event2/buffer.h>
#include <nlohmann/json.hpp>
#include <pt2rt/pt2rt.h>

#include "allocator.h"
#include "http_codec.h"
#include "http_infer.h"
#include "metrics.h"
#include "protocol.h"

using nlohmann::json;

namespace pt2serve {
namespace {

// bodies from this size up are followed by release_free_memory
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

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse json_response(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump(body);
  return r;
}

HttpResponse empty_response() {
  HttpResponse r;
  r.content_type.clear();
  return r;
}

// The exception being handled as the client is told it.
HttpResponse failure_response() {
  const Failure f = current_failure();
  return json_response(http_status(f.kind), {{"error", f.message}});
}

// Compresses a text answer the client accepts compressed.
void finish(HttpResponse& res, const std::string& accept_encoding) {
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

json tensor_metadata(const pt2rt::TensorSpec& t) {
  return {{"name", t.name}, {"datatype", datatype_name(t.dtype)}, {"shape", t.shape}};
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
Body read_body(HttpRequest& r, size_t max_request_bytes) {
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
  if (body.size >= kTrimFrom) pt2rt::cli::release_free_memory();
  if (!r.content_encoding.empty()) {
    body.decoded = decode_body(r.content_encoding, body.view(), max_request_bytes);
    body.is_decoded = true;
    body.raw.reset();
  } else if (body.size > max_request_bytes) {
    throw TooLarge("the request body is larger than the limit, " + std::to_string(max_request_bytes) +
                   " bytes (--max-request-mb), once decoded");
  }
  return body;
}

// A repository request's JSON body (may be empty) and the names of its parameters (the registry judges them).
json repository_body(const std::string_view text, const char* what, std::vector<std::string>* parameters = nullptr) {
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

// What the loop made of a request, for the worker that takes it.
struct LoopState {
  Route route;
  std::optional<HttpInferRequest> parsed;  // an inference the loop parsed already (its body then drained)
  ModelPtr model;                          // the model it was parsed for
};

HttpInferRequest parse_infer(Model& m, HttpRequest& r, size_t max_request_bytes) {
  try {
    const Body body = read_body(r, max_request_bytes);  // freed once parsed: the inputs hold their own copies
    return parse_http_infer(m.spec(), body.view(), r.has_header_length ? &r.header_length : nullptr,
                            max_request_bytes);
  } catch (...) {
    m.count_unreadable_request();
    throw;
  }
}

// The answer to a parsed inference once the model has run it.
HttpResponse infer_response(Model& m, const HttpInferRequest& parsed, const std::vector<pt2rt::Tensor>& outputs) {
  try {
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
    HttpResponse res;
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
  } catch (...) {
    m.count_unanswered_request();
    throw;
  }
}

}  // namespace

Route route_of(bool get, bool post, const std::vector<std::string>& s) {
  const size_t n = s.size();
  Route r;
  if (n == 0 || s[0] != "v2") {
    if (n == 1 && s[0] == "metrics" && get) r.endpoint = Endpoint::Metrics;
    return r;
  }
  if (n == 1 && get) r.endpoint = Endpoint::ServerMetadata;
  if (n == 3 && s[1] == "health" && get) {
    if (s[2] == "live") r.endpoint = Endpoint::HealthLive;
    if (s[2] == "ready") r.endpoint = Endpoint::HealthReady;
  }
  if (n >= 3 && s[1] == "models" && !s[2].empty()) {
    // /v2/models/{m}[/versions/{v}][/ready|/infer]
    const bool versioned = n >= 5 && s[3] == "versions" && !s[4].empty();
    const size_t base = versioned ? 5 : 3;
    if (n == base && get) r.endpoint = Endpoint::ModelMetadata;
    if (n == base + 1 && s[base] == "ready" && get) r.endpoint = Endpoint::ModelReady;
    if (n == base + 1 && s[base] == "infer" && post) r.endpoint = Endpoint::ModelInfer;
    if (r.endpoint != Endpoint::None) {
      r.model = s[2];
      if (versioned) r.version = s[4];
    }
  }
  if (n == 3 && s[1] == "repository" && s[2] == "index" && post) r.endpoint = Endpoint::RepositoryIndex;
  if (n == 5 && s[1] == "repository" && s[2] == "models" && post && (s[4] == "load" || s[4] == "unload")) {
    r.endpoint = s[4] == "load" ? Endpoint::RepositoryLoad : Endpoint::RepositoryUnload;
    r.model = s[3];
  }
  return r;
}

HttpApi::Handling HttpApi::on_loop(HttpRequest& r, HttpResponse& answer, const Loop& loop) {
  auto state = std::make_shared<LoopState>();
  state->route = route_of(r.get, r.post, r.segments);
  switch (state->route.endpoint) {
    case Endpoint::HealthLive:  // answered here, at once, whatever the workers are doing: probes pass while
    case Endpoint::HealthReady:  // models are busy
      answer = empty_response();
      return Handling::Answered;
    case Endpoint::ServerMetadata:
      answer = json_response(200, {{"name", "pt2serve"}, {"version", PT2SERVE_VERSION},
                                   {"extensions", {"binary_tensor_data", "model_repository"}}});
      return Handling::Answered;
    case Endpoint::ModelInfer: {
      r.handler_state = state;
      return loop_inference(r, state->route, answer, loop);
    }
    default:
      r.handler_state = state;
      return Handling::Worker;
  }
}

// A small, uncompressed inference may be run or queued from the loop; anything else goes to a worker as it is.
HttpApi::Handling HttpApi::loop_inference(HttpRequest& r, const Route& route, HttpResponse& answer, const Loop& loop) {
  if (!r.content_encoding.empty() || !r.body || evbuffer_get_length(r.body) > kInlineMaxBody) return Handling::Worker;
  ModelPtr m;
  try {
    m = registry_.find(route.model, route.version, true);
  } catch (...) {
    return Handling::Worker;  // a worker answers the error
  }
  const uint64_t recent = m->stats().recent_request_ns.load(std::memory_order_relaxed);
  if (loop.idle && !m->batching() && recent > 0 && recent < kInlineUnderNs) {  // a quick model, inline
    answer = handle(r);
    return Handling::Answered;
  }
  if (!m->batching() || evbuffer_get_length(r.body) > kBatchFromLoopMaxBody) return Handling::Worker;
  // parsed here (microseconds) and queued for the batcher, whose completion answers through the loop
  auto& state = *std::static_pointer_cast<LoopState>(r.handler_state);
  try {
    state.parsed = parse_infer(*m, r, max_request_bytes_);
    state.model = m;
    const auto asked = std::make_shared<HttpInferRequest>();  // what the answer needs of the request
    asked->outputs = state.parsed->outputs;
    asked->id = state.parsed->id;
    const Reply reply = loop.defer();
    // a model outlives its queued requests (its destructor drains them): a plain pointer, as a ModelPtr dropped in
    // the completion could be the last one and join the very thread it runs on
    Model* model = m.get();
    const bool queued = m->submit(state.parsed->inputs, [model, asked, reply, accept = r.accept_encoding](
                                                             std::vector<pt2rt::Tensor>* outputs, std::exception_ptr failure) {
      HttpResponse res;
      try {
        if (!outputs) std::rethrow_exception(failure);
        res = infer_response(*model, *asked, *outputs);
      } catch (...) {
        res = failure_response();
      }
      finish(res, accept);
      reply(std::move(res));
    });
    return queued ? Handling::Deferred : Handling::Worker;  // not joinable: a worker runs the parsed request
  } catch (...) {
    answer = failure_response();
    finish(answer, r.accept_encoding);
    return Handling::Answered;
  }
}

HttpResponse HttpApi::handle(HttpRequest& r) {
  HttpResponse res;
  try {
    const auto state = std::static_pointer_cast<LoopState>(r.handler_state);
    res = respond_to(r, state ? state->route : route_of(r.get, r.post, r.segments));
  } catch (...) {
    res = failure_response();
  }
  finish(res, r.accept_encoding);
  return res;
}

HttpResponse HttpApi::respond_to(HttpRequest& r, const Route& route) {
  switch (route.endpoint) {
    case Endpoint::HealthLive:
    case Endpoint::HealthReady:
      return empty_response();
    case Endpoint::ModelMetadata: {
      const ModelPtr m = registry_.find(route.model, route.version, true);
      json inputs = json::array(), outputs = json::array();
      for (const auto& t : m->spec().inputs) inputs.push_back(tensor_metadata(t));
      for (const auto& t : m->spec().outputs) outputs.push_back(tensor_metadata(t));
      return json_response(200, {{"name", m->name()}, {"versions", registry_.versions(m->name())},
                                 {"platform", "pt2rt"}, {"inputs", inputs}, {"outputs", outputs}});
    }
    case Endpoint::ModelReady: {
      const ModelPtr m = registry_.find(route.model, route.version, false);
      if (!m->ready()) return json_response(400, {{"error", "model " + m->name() + " is not ready: " + m->load_error()}});
      return empty_response();
    }
    case Endpoint::ModelInfer: {
      const auto start = std::chrono::steady_clock::now();
      const auto state = std::static_pointer_cast<LoopState>(r.handler_state);
      const bool parsed_on_loop = state && state->parsed;
      // a request the loop parsed runs on the model it was parsed for, whatever was loaded since
      const ModelPtr m = parsed_on_loop ? state->model : registry_.find(route.model, route.version, true);
      HttpInferRequest parsed = parsed_on_loop ? std::move(*state->parsed) : parse_infer(*m, r, max_request_bytes_);
      const auto outputs = m->infer(std::move(parsed.inputs));
      HttpResponse res = infer_response(*m, parsed, outputs);
      m->note_http_request_time(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count()));
      return res;
    }
    case Endpoint::RepositoryIndex: {
      const json body = repository_body(read_body(r, max_request_bytes_).view(), "repository index");
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
    case Endpoint::RepositoryLoad:
    case Endpoint::RepositoryUnload: {
      const bool load = route.endpoint == Endpoint::RepositoryLoad;
      std::vector<std::string> parameters;
      repository_body(read_body(r, max_request_bytes_).view(), load ? "load" : "unload", &parameters);
      if (load) {
        registry_.load(route.model, parameters);
      } else {
        registry_.unload(route.model, parameters);
      }
      return json_response(200, json::object());
    }
    case Endpoint::Metrics: {
      HttpResponse res;
      res.content_type = "text/plain; version=0.0.4";
      res.body = prometheus_text(registry_.models());
      return res;
    }
    case Endpoint::ServerMetadata:
    case Endpoint::None:
      break;
  }
  throw NotFound(clip("no such endpoint: " + r.method + " " + r.path));
}

}  // namespace pt2serve
