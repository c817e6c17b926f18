// Shapes and input validation against a spec: the same checks and messages in the full runtime and in lite.
#include "common.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>

namespace pt2rt::detail {

void check_shape(const TensorView& view, const char* who) {
  // torch multiplies the dims into strides and a byte size: a shape whose dims (zeros aside) multiply past int64
  // is refused here, before a c10::Error from inside torch (an empty tensor of such a shape included)
  uint64_t span = dtype_size(view.dtype);
  for (const int64_t d : view.shape) {
    if (d < 0) throw Error(ErrorCode::Usage, std::string(who) + ": negative dim in the shape " + shape_str(view.shape));
    if (d > 1 && span > static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(d)) {
      throw Error(ErrorCode::Usage, std::string(who) + ": the shape " + shape_str(view.shape) +
                                        " is too large (its dims multiply past 2^63 bytes)");
    }
    if (d > 1) span *= static_cast<uint64_t>(d);
  }
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}



std::string dims_str(const TensorSpec& t) {
  std::vector<std::string> dims;
  for (auto s : t.shape) dims.push_back(std::to_string(s));
  for (const auto& d : t.dynamic_dims) dims[d.dim] = d.name;
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + dims[i];
  return out + "]";
}

namespace {

template <class T>
void check_range(const void* data, int64_t numel, const ValueRange& r, const std::string& who) {
  const T* p = static_cast<const T*>(data);
  for (int64_t i = 0; i < numel; ++i) {
    const auto x = static_cast<int64_t>(p[i]);
    if (x < r.min || x > r.max)
      throw Error(ErrorCode::Input, who + ": element " + std::to_string(i) + " is " + std::to_string(x) +
                                        ", outside " + std::to_string(r.min) + ".." + std::to_string(r.max) +
                                        " (it indexes " + r.indexes + ")");
  }
}

void check_values(const TensorView& v, int64_t numel, const ValueRange& r, const std::string& who) {
  switch (v.dtype) {
    case DType::Int64: return check_range<int64_t>(v.data, numel, r, who);
    case DType::Int32: return check_range<int32_t>(v.data, numel, r, who);
    case DType::Int16: return check_range<int16_t>(v.data, numel, r, who);
    case DType::Int8: return check_range<int8_t>(v.data, numel, r, who);
    case DType::UInt8: return check_range<uint8_t>(v.data, numel, r, who);
    default: return;
  }
}

}  // namespace

void validate_inputs(const Spec& spec, const std::vector<TensorView>& inputs, bool cuda_available, bool values) {
  if (inputs.size() != spec.inputs.size()) {
    std::string names;
    for (const auto& t : spec.inputs) names += (names.empty() ? "" : ", ") + t.name;
    throw Error(ErrorCode::Input, "expected " + std::to_string(spec.inputs.size()) + " input" +
                                      (spec.inputs.size() == 1 ? "" : "s") + " (" + names + "), got " +
                                      std::to_string(inputs.size()));
  }
  const Device device = spec.device;
  std::map<std::string, std::pair<int64_t, std::string>> named;  // dim name -> (size, where seen)
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView& v = inputs[i];
    const TensorSpec& s = spec.inputs[i];
    const std::string who = "input " + std::to_string(i) + " (" + s.name + ")";
    if (v.dtype != s.dtype) {
      throw Error(ErrorCode::Input, who + ": expected dtype " + dtype_name(s.dtype) + ", got " + dtype_name(v.dtype));
    }
    if (v.shape.size() != s.shape.size()) {
      throw Error(ErrorCode::Input, who + ": expected " + std::to_string(s.shape.size()) + " dims " + dims_str(s) +
                                        ", got " + std::to_string(v.shape.size()) + " dims " +
                                        shape_str(v.shape));
    }
    int64_t numel = 1;
    for (size_t d = 0; d < s.shape.size(); ++d) {
      if (v.shape[d] < 0) throw Error(ErrorCode::Input, who + ": negative size in shape " + shape_str(v.shape));
      numel *= v.shape[d];
      if (s.shape[d] != -1 && v.shape[d] != s.shape[d]) {
        throw Error(ErrorCode::Input, who + ": expected shape " + dims_str(s) + ", got " + shape_str(v.shape) +
                                          " (dim " + std::to_string(d) + " must be " + std::to_string(s.shape[d]) +
                                          ")");
      }
    }
    for (const auto& dd : s.dynamic_dims) {
      const int64_t size = v.shape[dd.dim];
      if (size < dd.min || (dd.max && size > *dd.max)) {
        throw Error(ErrorCode::Input, who + ": dim " + std::to_string(dd.dim) + " (" + dd.name + ") must be in " +
                                          std::to_string(dd.min) + ".." +
                                          (dd.max ? std::to_string(*dd.max) : std::string("inf")) + ", got " +
                                          std::to_string(size));
      }
      auto same = [&](const std::string& name, int64_t value) {
        auto [it, inserted] = named.try_emplace(name, value, who);
        if (!inserted && it->second.first != value) {
          const std::string what = name == dd.name ? ") is " + std::to_string(value)
                                                   : ") makes " + name + " = " + std::to_string(value);
          throw Error(ErrorCode::Input, who + ": dim " + std::to_string(dd.dim) + " (" + dd.name + what + ", but " +
                                            it->second.second + " has " + name + " = " +
                                            std::to_string(it->second.first));
        }
      };
      same(dd.name, size);
      if (!dd.of.empty()) {
        if ((size - dd.offset) % dd.scale != 0) {
          throw Error(ErrorCode::Input, who + ": dim " + std::to_string(dd.dim) + " must be " + dd.name +
                                            " for a whole " + dd.of + ", got " + std::to_string(size));
        }
        same(dd.of, (size - dd.offset) / dd.scale);
      }
    }
    // memory on another device than the package's is copied there (run_model); a GPU this host lacks is not
    if (v.device != device && v.device == Device::CUDA && !cuda_available) {
      throw Error(ErrorCode::Input, who + ": a cuda tensor, but this host has no usable CUDA device (the package "
                                          "runs on " + device_name(device) + ")");
    }
    if (v.data == nullptr && numel != 0) throw Error(ErrorCode::Input, who + ": data is null");
    // an index past its table would fail the model's own check inside a parallel loop, which aborts the process
    if (values && s.values && v.device == Device::CPU) {
      check_shape(v, "tensor view");  // numel within int64
      check_values(v, numel, *s.values, who);
    }
  }
}

namespace {

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

size_t bytes_of(const std::vector<int64_t>& shape, DType dtype) {
  size_t n = dtype_size(dtype);
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

}  // namespace

void check_output_views(const Spec& spec, const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs) {
  if (outputs.size() != spec.outputs.size()) {
    throw Error(ErrorCode::Usage, "run_into: expected " + std::to_string(spec.outputs.size()) + " output view" +
                                      (spec.outputs.size() == 1 ? "" : "s") + ", got " + std::to_string(outputs.size()));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const OutputView& o = outputs[i];
    const TensorSpec& s = spec.outputs[i];
    const std::string who = "run_into: output " + std::to_string(i) + " (" + s.name + ")";
    if (o.dtype != s.dtype) {
      throw Error(ErrorCode::Usage, who + ": expected dtype " + dtype_name(s.dtype) + ", got " + dtype_name(o.dtype));
    }
    bool shape_ok = o.shape.size() == s.shape.size();
    for (size_t d = 0; shape_ok && d < s.shape.size(); ++d) shape_ok = o.shape[d] >= 0 && (s.shape[d] == -1 || o.shape[d] == s.shape[d]);
    if (!shape_ok) {
      throw Error(ErrorCode::Usage, who + ": expected shape " + detail::dims_str(s) + ", got " + detail::shape_str(o.shape));
    }
    detail::check_shape(TensorView{o.data, o.shape, o.dtype}, who.c_str());
    if (o.device != Device::CPU && o.device != spec.device) {
      throw Error(ErrorCode::Usage, who + ": a " + device_name(o.device) + " buffer; expected a cpu or " +
                                        device_name(spec.device) + " one");
    }
    const size_t bytes = bytes_of(o.shape, o.dtype);
    if (o.data == nullptr && bytes != 0) throw Error(ErrorCode::Usage, who + ": data is null");
    for (size_t j = 0; j < i; ++j) {
      if (overlap(o.data, bytes, outputs[j].data, bytes_of(outputs[j].shape, outputs[j].dtype))) {
        throw Error(ErrorCode::Usage, who + ": its buffer overlaps output " + std::to_string(j) + "'s");
      }
    }
    for (size_t j = 0; j < inputs.size(); ++j) {
      const TensorView& in = inputs[j];
      if (in.device == o.device && overlap(o.data, bytes, in.data, bytes_of(in.shape, in.dtype))) {
        throw Error(ErrorCode::Usage, who + ": its buffer overlaps input " + std::to_string(j) + "'s");
      }
    }
  }
}

Tolerance output_tolerance(const Spec& spec, std::optional<DType> dtype, size_t o, bool& fixed) {
  fixed = std::find(spec.degenerate_outputs.begin(), spec.degenerate_outputs.end(), static_cast<int>(o)) !=
          spec.degenerate_outputs.end();
  const auto it = dtype ? spec.tolerances.find(dtype_name(*dtype)) : spec.tolerances.end();
  return it != spec.tolerances.end() ? it->second : Tolerance{};
}

std::string differs_reason(size_t o, const Tolerance& tol, bool fixed) {
  char text[160];
  if (tol.atol_rel && !fixed) {
    std::snprintf(text, sizeof text, "output %zu differs beyond rtol %g, atol_rel %g (of its magnitude)", o, tol.rtol,
                  *tol.atol_rel);
  } else {
    std::snprintf(text, sizeof text, "output %zu differs beyond rtol %g, atol %g", o, tol.rtol, tol.atol);
  }
  return text;
}

}  // namespace pt2rt::detail

void pt2rt::check_inputs(const Spec& spec, const std::vector<TensorView>& inputs) {
  detail::validate_inputs(spec, inputs, true);  // where the memory lives is run()'s to check
  for (const auto& v : inputs) detail::check_shape(v, "tensor view");
}
