#include "http_infer.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "model.h"
#include "protocol.h"

namespace pt2serve {
namespace {

using json = nlohmann::json;
using pt2rt::DType;

// Element `i` of input `name`: what was wrong with it. An object is named, not printed (it may be large).
BadRequest bad_element(const std::string& name, size_t i, const json& v, const std::string& why) {
  std::string shown = "an object";
  if (v.is_string()) {
    shown = json(clip(v.get_ref<const std::string&>(), 48)).dump(-1, ' ', false, json::error_handler_t::replace);
  } else if (!v.is_object()) {
    shown = v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return BadRequest("input '" + name + "': element " + std::to_string(i) + " (" + clip(shown, 64) + ") " + why);
}

// A JSON number (or boolean) as an integer in [lo, hi]; a float only when it is integral ("3.0").
int64_t integer_element(const json& v, int64_t lo, int64_t hi, const char* type, const std::string& name, size_t i) {
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  const std::string range = std::string("is not an integer in the range of ") + type;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) throw bad_element(name, i, v, range);
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) throw bad_element(name, i, v, range);
    return x;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // hi + 1 as a double is exact for every type here (2^63 for int64), so the comparison is too
    if (!(d >= static_cast<double>(lo) && d < static_cast<double>(hi) + 1.0) || d != std::floor(d)) {
      throw bad_element(name, i, v, range);
    }
    return static_cast<int64_t>(d);
  }
  throw bad_element(name, i, v, "is not a number");
}

double float_element(const json& v, double max, const char* type, const std::string& name, size_t i) {
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (!v.is_number()) throw bad_element(name, i, v, "is not a number");
  const double d = v.get<double>();
  if (!(std::fabs(d) <= max)) throw bad_element(name, i, v, std::string("is out of the range of ") + type);
  return d;
}

// The "data" of an input (flat or nested lists, row-major) into `out`, `count` elements of `dtype`.
void fill_from_json(const json& data, DType dtype, uint8_t* out, size_t count, const std::string& name) {
  if (!data.is_array()) {
    throw BadRequest("input '" + name + "': \"data\" must be a list of values (flat or nested), got " +
                     (data.is_string() ? "a string" : data.is_object() ? "an object" : "one value"));
  }
  std::vector<const json*> flat;
  std::vector<const json*> stack{&data};
  while (!stack.empty()) {
    const json* j = stack.back();
    stack.pop_back();
    if (j->is_array()) {
      for (auto it = j->rbegin(); it != j->rend(); ++it) stack.push_back(&*it);
    } else {
      flat.push_back(j);
    }
    if (flat.size() > count) {
      throw BadRequest("input '" + name + "': data has more elements than its shape's " + std::to_string(count));
    }
  }
  if (flat.size() != count) {
    throw BadRequest("input '" + name + "': data has " + std::to_string(flat.size()) + " elements, its shape " +
                     std::to_string(count));
  }
  for (size_t i = 0; i < count; ++i) {
    const json& v = *flat[i];
    switch (dtype) {
      case DType::Float32: {
        const auto f = static_cast<float>(float_element(v, FLT_MAX, "FP32", name, i));
        std::memcpy(out + 4 * i, &f, 4);
        break;
      }
      case DType::Float64: {
        const double d = float_element(v, DBL_MAX, "FP64", name, i);
        std::memcpy(out + 8 * i, &d, 8);
        break;
      }
      case DType::Int64: {
        const int64_t x = integer_element(v, INT64_MIN, INT64_MAX, "INT64", name, i);
        std::memcpy(out + 8 * i, &x, 8);
        break;
      }
      case DType::Int32: {
        const auto x = static_cast<int32_t>(integer_element(v, INT32_MIN, INT32_MAX, "INT32", name, i));
        std::memcpy(out + 4 * i, &x, 4);
        break;
      }
      case DType::Int16: {
        const auto x = static_cast<int16_t>(integer_element(v, INT16_MIN, INT16_MAX, "INT16", name, i));
        std::memcpy(out + 2 * i, &x, 2);
        break;
      }
      case DType::Int8: {
        const auto x = static_cast<int8_t>(integer_element(v, INT8_MIN, INT8_MAX, "INT8", name, i));
        std::memcpy(out + i, &x, 1);
        break;
      }
      case DType::UInt8:
        out[i] = static_cast<uint8_t>(integer_element(v, 0, UINT8_MAX, "UINT8", name, i));
        break;
      case DType::Bool:
        out[i] = static_cast<uint8_t>(integer_element(v, 0, 1, "BOOL", name, i));
        break;
      default:
        throw BadRequest("input '" + name + "': " + datatype_name(dtype) +
                         " tensors go as binary data (the binary tensor data extension), not JSON");
    }
  }
}

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

HttpInferRequest parse_http_infer(const pt2rt::Spec& spec, const std::string& body, const std::string* header_length,
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
  json request;
  try {
    request = json::parse(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(json_size));
  } catch (const json::exception& e) {
    throw BadRequest(std::string("the request is not JSON: ") + e.what());
  }
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
  for (const auto& in : *inputs_json) {
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
      std::vector<uint8_t> buffer(slot.bytes);
      fill_from_json(*data, slot.dtype, buffer.data(), slot.count, name);
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
