#include "http_infer.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <map>

#include "protocol.h"

namespace pt2serve {
namespace {

using json = nlohmann::json;
using pt2rt::DType;

// One value of an input's "data", as parsed, before the input's datatype decides what it must be.
struct Scalar {
  enum Kind : uint8_t { Bool, Int, UInt, Float, Other } kind;
  union {
    bool b;
    int64_t i;
    uint64_t u;
    double d;
  };
};

// An input's "data" lists, flattened in row-major order, 9 bytes a value (a kind, 8 bytes) where a parsed JSON
// document takes several times that (a 60 MB body peaked at 1.2 GB that way). Strings, nulls and objects are kept
// as Other, shown in an error by `first_other` (only the first can be reported: elements are checked in order).
struct DataValues {
  std::deque<Scalar::Kind> kinds;  // deques grow without copying what they hold
  std::deque<uint64_t> bits;
  std::string first_other;

  size_t size() const { return kinds.size(); }
  void push(const Scalar& s) {
    kinds.push_back(s.kind);
    uint64_t b = 0;
    std::memcpy(&b, &s.u, sizeof b);
    bits.push_back(b);
  }
  Scalar at(size_t i) const {
    Scalar s{kinds[i], {}};
    std::memcpy(&s.u, &bits[i], sizeof bits[i]);
    return s;
  }
};

std::string shown(const Scalar& v, const DataValues& d) {
  switch (v.kind) {
    case Scalar::Bool: return v.b ? "true" : "false";
    case Scalar::Int: return std::to_string(v.i);
    case Scalar::UInt: return std::to_string(v.u);
    case Scalar::Float: return json(v.d).dump();
    case Scalar::Other: break;
  }
  return d.first_other;
}

// Element `i` of input `name`: what was wrong with it.
BadRequest bad_element(const std::string& name, size_t i, const std::string& shown, const std::string& why) {
  return BadRequest("input '" + name + "': element " + std::to_string(i) + " (" + clip(shown, 64) + ") " + why);
}

// A number (or boolean) as an integer in [lo, hi]; a float only when it is integral ("3.0").
int64_t integer_element(const Scalar& v, const DataValues& d, int64_t lo, int64_t hi, const char* type,
                        const std::string& name, size_t i) {
  const std::string range = std::string("is not an integer in the range of ") + type;
  switch (v.kind) {
    case Scalar::Bool: return v.b ? 1 : 0;
    case Scalar::UInt:
      if (v.u > static_cast<uint64_t>(hi)) throw bad_element(name, i, shown(v, d), range);
      return static_cast<int64_t>(v.u);
    case Scalar::Int:
      if (v.i < lo || v.i > hi) throw bad_element(name, i, shown(v, d), range);
      return v.i;
    case Scalar::Float:
      // hi + 1 as a double is exact for every type here (2^63 for int64), so the comparison is too
      if (!(v.d >= static_cast<double>(lo) && v.d < static_cast<double>(hi) + 1.0) || v.d != std::floor(v.d)) {
        throw bad_element(name, i, shown(v, d), range);
      }
      return static_cast<int64_t>(v.d);
    case Scalar::Other: break;
  }
  throw bad_element(name, i, shown(v, d), "is not a number");
}

double float_element(const Scalar& v, const DataValues& d, double max, const char* type, const std::string& name,
                     size_t i) {
  double x = 0;
  switch (v.kind) {
    case Scalar::Bool: return v.b ? 1.0 : 0.0;
    case Scalar::Int: x = static_cast<double>(v.i); break;
    case Scalar::UInt: x = static_cast<double>(v.u); break;
    case Scalar::Float: x = v.d; break;
    case Scalar::Other: throw bad_element(name, i, shown(v, d), "is not a number");
  }
  if (!(std::fabs(x) <= max)) throw bad_element(name, i, shown(v, d), std::string("is out of the range of ") + type);
  return x;
}

// An input's data into `out`, `count` elements of `dtype`.
void fill_from_values(const DataValues& d, DType dtype, uint8_t* out, size_t count, const std::string& name) {
  if (d.size() > count) {
    throw BadRequest("input '" + name + "': data has more elements than its shape's " + std::to_string(count));
  }
  if (d.size() != count) {
    throw BadRequest("input '" + name + "': data has " + std::to_string(d.size()) + " elements, its shape " +
                     std::to_string(count));
  }
  for (size_t i = 0; i < count; ++i) {
    const Scalar v = d.at(i);
    switch (dtype) {
      case DType::Float32: {
        const auto f = static_cast<float>(float_element(v, d, FLT_MAX, "FP32", name, i));
        std::memcpy(out + 4 * i, &f, 4);
        break;
      }
      case DType::Float64: {
        const double x = float_element(v, d, DBL_MAX, "FP64", name, i);
        std::memcpy(out + 8 * i, &x, 8);
        break;
      }
      case DType::Int64: {
        const int64_t x = integer_element(v, d, INT64_MIN, INT64_MAX, "INT64", name, i);
        std::memcpy(out + 8 * i, &x, 8);
        break;
      }
      case DType::Int32: {
        const auto x = static_cast<int32_t>(integer_element(v, d, INT32_MIN, INT32_MAX, "INT32", name, i));
        std::memcpy(out + 4 * i, &x, 4);
        break;
      }
      case DType::Int16: {
        const auto x = static_cast<int16_t>(integer_element(v, d, INT16_MIN, INT16_MAX, "INT16", name, i));
        std::memcpy(out + 2 * i, &x, 2);
        break;
      }
      case DType::Int8: {
        const auto x = static_cast<int8_t>(integer_element(v, d, INT8_MIN, INT8_MAX, "INT8", name, i));
        std::memcpy(out + i, &x, 1);
        break;
      }
      case DType::UInt8:
        out[i] = static_cast<uint8_t>(integer_element(v, d, 0, UINT8_MAX, "UINT8", name, i));
        break;
      case DType::Bool:
        out[i] = static_cast<uint8_t>(integer_element(v, d, 0, 1, "BOOL", name, i));
        break;
      default:
        throw BadRequest("input '" + name + "': " + datatype_name(dtype) +
                         " tensors go as binary data (the binary tensor data extension), not JSON");
    }
  }
}

// Values of the document outside the inputs' "data" lists, at most: names, shapes and parameters need few.
constexpr size_t kMaxDocumentValues = size_t{1} << 20;

// Parses the request's JSON (SAX) into a document of everything but the inputs' "data" lists, which go flattened
// into DataValues as they are read; a document's input k with a "data" list has an empty list there and its
// values in data[k].
class RequestReader : public nlohmann::json_sax<json> {
 public:
  json document;
  std::map<size_t, DataValues> data;  // by the input's position in "inputs"

  bool null() override { return scalar(nullptr, Scalar{Scalar::Other, {}}, "null"); }
  bool boolean(bool v) override {
    Scalar s{Scalar::Bool, {}};
    s.b = v;
    return scalar(v, s);
  }
  bool number_integer(number_integer_t v) override {
    Scalar s{Scalar::Int, {}};
    s.i = v;
    return scalar(v, s);
  }
  bool number_unsigned(number_unsigned_t v) override {
    Scalar s{Scalar::UInt, {}};
    s.u = v;
    return scalar(v, s);
  }
  bool number_float(number_float_t v, const string_t&) override {
    Scalar s{Scalar::Float, {}};
    s.d = v;
    return scalar(v, s);
  }
  bool string(string_t& v) override {
    if (data_depth_ > 0) {
      return other(json(clip(v, 48)).dump(-1, ' ', false, json::error_handler_t::replace));
    }
    return add(json(std::move(v)));
  }
  bool binary(binary_t&) override { throw BadRequest("the request is not JSON: it holds binary values"); }
  bool start_object(std::size_t) override {
    if (data_depth_ > 0) {  // an object among the data: an error when reached; its contents are skipped
      if (skip_depth_++ == 0) other("an object");
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& k) override {
    if (skip_depth_ == 0) key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (skip_depth_ > 0) return true;
    if (data_depth_ > 0) {
      ++data_depth_;
      return true;
    }
    // inputs[k].data: the root object, its "inputs" list, input k's object, and the key "data"
    if (stack_.size() == 3 && stack_[1] == inputs_list_ && stack_[2]->is_object() && key_ == "data") {
      const size_t k = stack_[1]->size() - 1;
      (*stack_.back())["data"] = json::array();
      current_ = &data[k];
      *current_ = DataValues{};
      data_depth_ = 1;
      return true;
    }
    const bool inputs = stack_.size() == 1 && stack_[0]->is_object() && key_ == "inputs";
    open(json::array());
    if (inputs) inputs_list_ = stack_.back();
    return true;
  }
  bool end_array() override {
    if (skip_depth_ > 0) return true;
    if (data_depth_ > 0) {
      --data_depth_;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw BadRequest(std::string("the request is not JSON: ") + e.what());
  }

 private:
  template <typename V>
  bool scalar(V&& v, const Scalar& s, const char* other_shown = nullptr) {
    if (skip_depth_ > 0) return true;
    if (data_depth_ > 0) {
      if (other_shown) return other(other_shown);
      current_->push(s);
      return true;
    }
    return add(json(std::forward<V>(v)));
  }

  bool other(std::string shown) {
    if (current_->first_other.empty()) current_->first_other = std::move(shown);
    current_->push(Scalar{Scalar::Other, {}});
    return true;
  }

  // A value into the container being read (at the pending key of an object); the container itself when it is one.
  json* place(json&& v) {
    if (++values_ > kMaxDocumentValues) {
      throw BadRequest("the request has more than " + std::to_string(kMaxDocumentValues) +
                       " JSON values outside the inputs' \"data\"");
    }
    if (stack_.empty()) {
      document = std::move(v);
      return &document;
    }
    json& top = *stack_.back();
    if (top.is_object()) {
      json& slot = top[key_];
      slot = std::move(v);
      return &slot;
    }
    top.push_back(std::move(v));
    return &top.back();
  }

  bool add(json&& v) {
    place(std::move(v));
    return true;
  }

  bool open(json&& container) {
    stack_.push_back(place(std::move(container)));
    return true;
  }

  std::vector<json*> stack_;  // the containers being read, outermost first (depth is bounded before parsing)
  std::string key_;
  const json* inputs_list_ = nullptr;  // the root's "inputs" (a std::map slot: its address is stable)
  size_t data_depth_ = 0;   // inside an input's "data" lists
  size_t skip_depth_ = 0;   // inside an object among the data
  size_t values_ = 0;
  DataValues* current_ = nullptr;
};

// A byte count as a header carries it: decimal digits only, no sign, no spaces, no overflow.
bool parse_size(const std::string& s, size_t& out) {
  if (s.empty() || s.size() > 19) return false;
  out = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    out = out * 10 + static_cast<size_t>(c - '0');
  }
  return true;
}

const json* member(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// An object's "parameters": absent is empty; present, it must be an object.
const json& parameters_of(const json& object, const std::string& what) {
  static const json empty = json::object();
  const json* p = member(object, "parameters");
  if (p == nullptr) return empty;
  if (!p->is_object()) throw BadRequest(what + ": \"parameters\" must be an object");
  return *p;
}

bool flag(const json& parameters, const char* key, bool fallback, const std::string& what) {
  const json* v = member(parameters, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) throw BadRequest(what + ": parameter " + key + " must be true or false");
  return v->get<bool>();
}

}  // namespace

HttpInferRequest parse_http_infer(const pt2rt::Spec& spec, std::string_view body, const std::string* header_length,
                                  size_t max_bytes) {
  if (body.size() > max_bytes) {
    throw BadRequest("the request has " + std::to_string(body.size()) + " bytes, more than the limit " +
                     std::to_string(max_bytes) + " (--max-request-mb)");
  }
  size_t json_size = body.size();
  if (header_length != nullptr) {
    if (!parse_size(*header_length, json_size)) {
      throw BadRequest("Inference-Header-Content-Length must be a number of bytes, got '" + clip(*header_length, 64) +
                       "'");
    }
    if (json_size > body.size()) {
      throw BadRequest("Inference-Header-Content-Length is " + *header_length + ", but the body has " +
                       std::to_string(body.size()) + " bytes");
    }
  }
  check_json_depth(body.data(), body.data() + json_size);
  RequestReader reader;
  json::sax_parse(body.data(), body.data() + json_size, &reader);
  const json& request = reader.document;
  const json* inputs_json = request.is_object() ? member(request, "inputs") : nullptr;
  if (inputs_json == nullptr || !inputs_json->is_array()) {
    throw BadRequest("expected a JSON object with \"inputs\": [...]");
  }

  if (const json* id = member(request, "id"); id != nullptr && !id->is_string()) {
    throw BadRequest("\"id\" must be a string");
  }

  HttpInferRequest out;
  RequestInputs inputs(spec, max_bytes);
  size_t offset = json_size;
  size_t position = 0;
  for (const auto& in : *inputs_json) {
    const size_t k = position++;
    const json* name_json = in.is_object() ? member(in, "name") : nullptr;
    const json* shape_json = in.is_object() ? member(in, "shape") : nullptr;
    const json* datatype_json = in.is_object() ? member(in, "datatype") : nullptr;
    if (name_json == nullptr || !name_json->is_string() || shape_json == nullptr || !shape_json->is_array() ||
        datatype_json == nullptr || !datatype_json->is_string()) {
      throw BadRequest("each input needs \"name\", \"shape\" and \"datatype\"");
    }
    const std::string name = name_json->get<std::string>();
    std::vector<int64_t> shape;
    for (const auto& d : *shape_json) {
      if (!d.is_number_integer() || (d.is_number_unsigned() && d.get<uint64_t>() > INT64_MAX)) {
        throw BadRequest("input '" + name + "': its shape must be a list of integers");
      }
      shape.push_back(d.get<int64_t>());
    }
    const auto slot = inputs.check(name, datatype_json->get<std::string>(), shape);
    const json& params = parameters_of(in, "input '" + name + "'");
    if (const json* size = member(params, "binary_data_size")) {
      if (!size->is_number_unsigned() || size->get<uint64_t>() != slot.bytes) {
        throw BadRequest("input '" + name + "': binary_data_size must be " + std::to_string(slot.bytes) +
                         " for the shape and datatype given");
      }
      if (slot.bytes > body.size() - offset) {
        throw BadRequest("input '" + name + "': the body ends before its " + std::to_string(slot.bytes) + " bytes");
      }
      inputs.set(slot, body.data() + offset);
      offset += slot.bytes;
    } else if (const json* data = member(in, "data")) {
      const auto values = reader.data.find(k);
      if (!data->is_array() || values == reader.data.end()) {
        throw BadRequest("input '" + name + "': \"data\" must be a list of values (flat or nested), got " +
                         (data->is_string() ? "a string" : data->is_object() ? "an object" : "one value"));
      }
      std::vector<uint8_t> buffer(slot.bytes);
      fill_from_values(values->second, slot.dtype, buffer.data(), slot.count, name);
      reader.data.erase(values);  // its values are in the buffer now
      inputs.set(slot, buffer.data());
    } else {
      throw BadRequest("input '" + name + "' has neither \"data\" nor parameters.binary_data_size");
    }
  }
  if (offset != body.size()) {
    throw BadRequest("the body has " + std::to_string(body.size() - offset) + " bytes no input claims");
  }
  out.inputs = inputs.take();

  // which outputs, and which as binary data: checked before the model runs
  const bool binary_default = flag(parameters_of(request, "the request"), "binary_data_output", false, "the request");
  if (const json* wanted = member(request, "outputs")) {
    if (!wanted->is_array()) throw BadRequest("\"outputs\" must be a list");
    for (const auto& o : *wanted) {
      const json* name = o.is_object() ? member(o, "name") : nullptr;
      if (name == nullptr || !name->is_string()) throw BadRequest("each requested output needs a \"name\"");
      const size_t index = output_index(spec, name->get<std::string>());
      for (const auto& [seen, binary] : out.outputs) {
        if (seen == index) throw BadRequest("output '" + name->get<std::string>() + "' is asked for twice");
      }
      const std::string what = "output '" + name->get<std::string>() + "'";
      out.outputs.emplace_back(index, flag(parameters_of(o, what), "binary_data", binary_default, what));
    }
  } else {
    for (size_t i = 0; i < spec.outputs.size(); ++i) out.outputs.emplace_back(i, binary_default);
  }
  for (const auto& [index, binary] : out.outputs) {
    const DType dtype = spec.outputs[index].dtype;
    if (!binary && (dtype == DType::Float16 || dtype == DType::BFloat16)) {
      throw BadRequest("output '" + spec.outputs[index].name + "' is " + datatype_name(dtype) +
                       ", which goes as binary data only: ask for it with \"binary_data\": true");
    }
  }
  if (const json* id = member(request, "id")) out.id = *id;
  return out;
}

json tensor_to_json(const pt2rt::Tensor& t) {
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

}  // namespace pt2serve
