// The C API (pt2rt_c.h) over the C++ one: every entry point catches everything and returns a status.
#include "pt2rt/pt2rt_c.h"

#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "pt2rt/pt2rt.h"

#include "common.h"

struct pt2rt_runtime {
  pt2rt::Runtime runtime;
};

struct pt2rt_tensor {
  pt2rt::Tensor tensor;
};

struct pt2rt_options {
  pt2rt::Options options;
};

namespace {

thread_local std::string last_error;

pt2rt_status fail(pt2rt_status status, std::string message) {
  last_error = std::move(message);
  return status;
}

pt2rt_status status_of(pt2rt::ErrorCode code) { return static_cast<pt2rt_status>(pt2rt::exit_code(code)); }

// Runs `body` (returning a status), turning every exception into a status and this thread's message.
template <typename F>
pt2rt_status guarded(const char* function, F&& body) noexcept {
  try {
    return body();
  } catch (const pt2rt::Error& e) {
    return fail(status_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(PT2RT_ERROR_RUNTIME, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(PT2RT_ERROR_RUNTIME, std::string(function) + ": " + e.what());
  } catch (...) {
    return fail(PT2RT_ERROR_RUNTIME, std::string(function) + ": unknown error");
  }
}

constexpr pt2rt::DType kDTypes[] = {
    pt2rt::DType::Float32, pt2rt::DType::Float64, pt2rt::DType::Float16, pt2rt::DType::BFloat16,
    pt2rt::DType::Int64,   pt2rt::DType::Int32,   pt2rt::DType::Int16,   pt2rt::DType::Int8,
    pt2rt::DType::UInt8,   pt2rt::DType::Bool,
};
constexpr int kNumDTypes = sizeof(kDTypes) / sizeof(kDTypes[0]);

// The integer a caller passed as an enum. C allows any int there; in C++ reading an enum object that holds a value
// outside its enumerators' range is undefined, so the bytes are copied out instead (UBSan checks this).
// C passes an enum as an int (signed: -1 stays -1 in messages).
template <typename E>
int64_t raw_value(const E& e) {
  std::conditional_t<sizeof(E) == sizeof(int), int, std::underlying_type_t<E>> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<int64_t>(v);
}

bool valid(const pt2rt_dtype& d) { return raw_value(d) >= 0 && raw_value(d) < kNumDTypes; }

pt2rt_dtype to_c(pt2rt::DType d) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kDTypes[i] == d) return static_cast<pt2rt_dtype>(i);
  return PT2RT_FLOAT32;  // unreachable: every DType is in the table
}

// The spec of input (or output) `index`; nullptr, with this thread's usage error set, when there is none.
const pt2rt::TensorSpec* spec_at(const pt2rt_runtime* rt, size_t index, bool input, const char* function) {
  if (rt == nullptr) {
    fail(PT2RT_ERROR_USAGE, std::string(function) + ": runtime is NULL");
    return nullptr;
  }
  const auto& specs = input ? rt->runtime.spec().inputs : rt->runtime.spec().outputs;
  if (index >= specs.size()) {
    fail(PT2RT_ERROR_USAGE, std::string(function) + ": index " + std::to_string(index) +
                                " is out of range (the package has " + std::to_string(specs.size()) + ")");
    return nullptr;
  }
  return &specs[index];
}

pt2rt_status tensor_spec(const pt2rt_runtime* rt, size_t index, bool input, const char** name, pt2rt_dtype* dtype,
                         const int64_t** shape, size_t* ndim) {
  const pt2rt::TensorSpec* s = spec_at(rt, index, input, input ? "pt2rt_input_spec" : "pt2rt_output_spec");
  if (s == nullptr) return PT2RT_ERROR_USAGE;
  if (name) *name = s->name.c_str();
  if (dtype) *dtype = to_c(s->dtype);
  if (shape) *shape = s->shape.data();
  if (ndim) *ndim = s->shape.size();
  return PT2RT_OK;
}

// The caller's input views (host memory) as the C++ API takes them; the runtime copies them to a CUDA package's GPU.
pt2rt_status input_views(const char* function, const pt2rt_tensor_view* inputs, size_t n_inputs,
                         std::vector<pt2rt::TensorView>& views) {
  if (n_inputs > 0 && inputs == nullptr)
    return fail(PT2RT_ERROR_USAGE, std::string(function) + ": inputs is NULL but n_inputs is " + std::to_string(n_inputs));
  views.reserve(n_inputs);
  for (size_t i = 0; i < n_inputs; ++i) {
    const pt2rt_tensor_view& v = inputs[i];
    const std::string who = std::string(function) + ": inputs[" + std::to_string(i) + "]";
    if (v.ndim > 0 && v.shape == nullptr)
      return fail(PT2RT_ERROR_USAGE, who + ".shape is NULL but ndim is " + std::to_string(v.ndim));
    if (!valid(v.dtype))
      return fail(PT2RT_ERROR_USAGE, who + ".dtype is " + std::to_string(raw_value(v.dtype)) + ", not a pt2rt_dtype");
    views.push_back(pt2rt::TensorView{v.data, std::vector<int64_t>(v.shape, v.shape + v.ndim), kDTypes[raw_value(v.dtype)]});
  }
  return PT2RT_OK;
}

pt2rt_status load(const char* function, pt2rt_runtime** out, const pt2rt_options* options,
                  const std::function<pt2rt::Runtime(const pt2rt::Options&)>& body) {
  return guarded(function, [&] {
    if (out == nullptr) return fail(PT2RT_ERROR_USAGE, std::string(function) + ": out is NULL (expected a pt2rt_runtime**)");
    *out = nullptr;
    *out = new pt2rt_runtime{body(options ? options->options : pt2rt::Options{})};
    return PT2RT_OK;
  });
}

// A setter of pt2rt_options: NULL options is a usage error; `body` returns the status.
template <typename F>
pt2rt_status set_option(const char* function, pt2rt_options* options, F&& body) {
  return guarded(function, [&] {
    if (options == nullptr) return fail(PT2RT_ERROR_USAGE, std::string(function) + ": options is NULL");
    return body(options->options);
  });
}

pt2rt_status set_flag(const char* function, pt2rt_options* options, bool pt2rt::Options::*field, int enabled) {
  return set_option(function, options, [&](pt2rt::Options& o) {
    if (enabled != 0 && enabled != 1)
      return fail(PT2RT_ERROR_USAGE, std::string(function) + ": enabled is " + std::to_string(enabled) + ", expected 0 or 1");
    o.*field = enabled == 1;
    return PT2RT_OK;
  });
}

pt2rt_status set_bytes(const char* function, pt2rt_options* options, std::uint64_t pt2rt::Options::*field,
                       uint64_t bytes) {
  return set_option(function, options, [&](pt2rt::Options& o) {
    if (bytes == 0) return fail(PT2RT_ERROR_USAGE, std::string(function) + ": bytes is 0, expected at least 1");
    o.*field = bytes;
    return PT2RT_OK;
  });
}

}  // namespace

extern "C" {

const char* pt2rt_last_error(void) { return last_error.c_str(); }

const char* pt2rt_status_name(pt2rt_status status) {
  const int64_t value = raw_value(status);
  return value >= 0 && value <= 7 ? pt2rt::detail::status_identifier(static_cast<int>(value)) : "unknown";
}

const char* pt2rt_version(void) { return pt2rt::version(); }

uint32_t pt2rt_c_api_version(void) { return PT2RT_C_API_VERSION; }

pt2rt_status pt2rt_check_c_api_version(uint32_t header_version) {
  if (header_version >= 1 && header_version <= PT2RT_C_API_VERSION) return PT2RT_OK;
  return fail(PT2RT_ERROR_USAGE, "pt2rt_check_c_api_version: the program was built for C API version " +
                                     std::to_string(header_version) + ", this libpt2rt.so (" + pt2rt::version() +
                                     ") speaks versions 1 to " + std::to_string(PT2RT_C_API_VERSION));
}

const char* pt2rt_dtype_name(pt2rt_dtype dtype) {
  return valid(dtype) ? pt2rt::dtype_name(kDTypes[raw_value(dtype)]) : nullptr;
}

size_t pt2rt_dtype_size(pt2rt_dtype dtype) { return valid(dtype) ? pt2rt::dtype_size(kDTypes[raw_value(dtype)]) : 0; }

pt2rt_status pt2rt_load(const char* package_path, const char* const* ops_libraries, size_t n_ops_libraries,
                        int num_runners, pt2rt_runtime** out) {
  return guarded("pt2rt_load", [&] {
    if (out == nullptr) return fail(PT2RT_ERROR_USAGE, "pt2rt_load: out is NULL (expected a pt2rt_runtime**)");
    *out = nullptr;
    if (package_path == nullptr) return fail(PT2RT_ERROR_USAGE, "pt2rt_load: package_path is NULL");
    if (n_ops_libraries > 0 && ops_libraries == nullptr)
      return fail(PT2RT_ERROR_USAGE, "pt2rt_load: ops_libraries is NULL but n_ops_libraries is " +
                                         std::to_string(n_ops_libraries));
    if (num_runners < 0)
      return fail(PT2RT_ERROR_USAGE,
                  "pt2rt_load: num_runners is " + std::to_string(num_runners) + ", expected >= 1 (or 0: 1)");
    pt2rt::Options options;
    options.num_runners = num_runners == 0 ? 1 : num_runners;
    for (size_t i = 0; i < n_ops_libraries; ++i) {
      if (ops_libraries[i] == nullptr)
        return fail(PT2RT_ERROR_USAGE, "pt2rt_load: ops_libraries[" + std::to_string(i) + "] is NULL");
      options.ops_libraries.emplace_back(ops_libraries[i]);
    }
    *out = new pt2rt_runtime{pt2rt::Runtime::load(package_path, options)};
    return PT2RT_OK;
  });
}

void pt2rt_runtime_free(pt2rt_runtime* runtime) { delete runtime; }

pt2rt_status pt2rt_options_create(pt2rt_options** out) {
  return guarded("pt2rt_options_create", [&] {
    if (out == nullptr) return fail(PT2RT_ERROR_USAGE, "pt2rt_options_create: out is NULL (expected a pt2rt_options**)");
    *out = new pt2rt_options{};
    return PT2RT_OK;
  });
}

void pt2rt_options_free(pt2rt_options* options) { delete options; }

pt2rt_status pt2rt_options_set_cpu_isa(pt2rt_options* options, const char* isa) {
  return set_option("pt2rt_options_set_cpu_isa", options, [&](pt2rt::Options& o) {
    o.cpu_isa = isa ? isa : "";
    return PT2RT_OK;
  });
}

pt2rt_status pt2rt_options_set_num_runners(pt2rt_options* options, int num_runners) {
  return set_option("pt2rt_options_set_num_runners", options, [&](pt2rt::Options& o) {
    if (num_runners < 1 || num_runners > pt2rt::kMaxRunners)
      return fail(PT2RT_ERROR_USAGE, "pt2rt_options_set_num_runners: num_runners is " + std::to_string(num_runners) +
                                         ", expected 1.." + std::to_string(pt2rt::kMaxRunners));
    o.num_runners = num_runners;
    return PT2RT_OK;
  });
}

pt2rt_status pt2rt_options_add_ops_library(pt2rt_options* options, const char* path) {
  return set_option("pt2rt_options_add_ops_library", options, [&](pt2rt::Options& o) {
    if (path == nullptr || *path == '\0')
      return fail(PT2RT_ERROR_USAGE, "pt2rt_options_add_ops_library: path is NULL or empty");
    o.ops_libraries.emplace_back(path);
    return PT2RT_OK;
  });
}

pt2rt_status pt2rt_options_set_ops_from_package_dir(pt2rt_options* options, int enabled) {
  return set_flag("pt2rt_options_set_ops_from_package_dir", options, &pt2rt::Options::ops_from_package_dir, enabled);
}

pt2rt_status pt2rt_options_set_check_torch_version(pt2rt_options* options, int enabled) {
  return set_flag("pt2rt_options_set_check_torch_version", options, &pt2rt::Options::check_torch_version, enabled);
}

pt2rt_status pt2rt_options_set_check_sha256(pt2rt_options* options, int enabled) {
  return set_flag("pt2rt_options_set_check_sha256", options, &pt2rt::Options::check_sha256, enabled);
}

pt2rt_status pt2rt_options_set_keep_package_open(pt2rt_options* options, int enabled) {
  return set_flag("pt2rt_options_set_keep_package_open", options, &pt2rt::Options::keep_package_open, enabled);
}

pt2rt_status pt2rt_options_set_reuse_run_memory(pt2rt_options* options, int enabled) {
  return set_flag("pt2rt_options_set_reuse_run_memory", options, &pt2rt::Options::reuse_run_memory, enabled);
}

pt2rt_status pt2rt_options_set_intra_op_threads(pt2rt_options* options, int threads) {
  return set_option("pt2rt_options_set_intra_op_threads", options, [&](pt2rt::Options& o) {
    if (threads < 0 || threads > pt2rt::kMaxIntraOpThreads)
      return fail(PT2RT_ERROR_USAGE, "pt2rt_options_set_intra_op_threads: threads is " + std::to_string(threads) +
                                         ", expected 1.." + std::to_string(pt2rt::kMaxIntraOpThreads) +
                                         " (0: pt2rt_set_num_threads' count)");
    o.intra_op_threads = threads;
    return PT2RT_OK;
  });
}

pt2rt_status pt2rt_options_set_device_index(pt2rt_options* options, int device_index) {
  return set_option("pt2rt_options_set_device_index", options, [&](pt2rt::Options& o) {
    if (device_index < -1 || device_index > 127)
      return fail(PT2RT_ERROR_USAGE, "pt2rt_options_set_device_index: device_index is " + std::to_string(device_index) +
                                         ", expected -1 (the current device) or 0..127");
    o.device_index = device_index;
    return PT2RT_OK;
  });
}

pt2rt_status pt2rt_options_set_max_record_bytes(pt2rt_options* options, uint64_t bytes) {
  return set_bytes("pt2rt_options_set_max_record_bytes", options, &pt2rt::Options::max_record_bytes, bytes);
}

pt2rt_status pt2rt_options_set_max_metadata_bytes(pt2rt_options* options, uint64_t bytes) {
  return set_bytes("pt2rt_options_set_max_metadata_bytes", options, &pt2rt::Options::max_metadata_bytes, bytes);
}

pt2rt_status pt2rt_options_set_max_extracted_bytes(pt2rt_options* options, uint64_t bytes) {
  return set_bytes("pt2rt_options_set_max_extracted_bytes", options, &pt2rt::Options::max_extracted_bytes, bytes);
}

pt2rt_status pt2rt_load_with_options(const char* package_path, const pt2rt_options* options, pt2rt_runtime** out) {
  return load("pt2rt_load_with_options", out, options, [&](const pt2rt::Options& o) {
    if (package_path == nullptr) throw pt2rt::Error(pt2rt::ErrorCode::Usage, "pt2rt_load_with_options: package_path is NULL");
    return pt2rt::Runtime::load(package_path, o);
  });
}

pt2rt_status pt2rt_load_from_memory(const void* bytes, size_t size, const pt2rt_options* options, pt2rt_runtime** out) {
  return load("pt2rt_load_from_memory", out, options, [&](const pt2rt::Options& o) {
    if (bytes == nullptr) throw pt2rt::Error(pt2rt::ErrorCode::Usage, "pt2rt_load_from_memory: bytes is NULL");
    return pt2rt::Runtime::load_from_memory(bytes, size, o);
  });
}

pt2rt_status pt2rt_run(const pt2rt_runtime* runtime, const pt2rt_tensor_view* inputs, size_t n_inputs,
                       pt2rt_tensor** outputs, size_t outputs_capacity, size_t* n_outputs) {
  return guarded("pt2rt_run", [&] {
    if (runtime == nullptr) return fail(PT2RT_ERROR_USAGE, "pt2rt_run: runtime is NULL");
    if (n_outputs == nullptr) return fail(PT2RT_ERROR_USAGE, "pt2rt_run: n_outputs is NULL (expected a size_t*)");
    *n_outputs = 0;
    const pt2rt::Spec& spec = runtime->runtime.spec();
    if (outputs_capacity < spec.outputs.size()) {
      *n_outputs = spec.outputs.size();
      return fail(PT2RT_ERROR_USAGE, "pt2rt_run: outputs_capacity is " + std::to_string(outputs_capacity) +
                                         ", the package has " + std::to_string(spec.outputs.size()) + " outputs");
    }
    if (outputs == nullptr) return fail(PT2RT_ERROR_USAGE, "pt2rt_run: outputs is NULL");
    const bool cuda = spec.device == pt2rt::Device::CUDA;
    std::vector<pt2rt::TensorView> views;
    const pt2rt_status st = input_views("pt2rt_run", inputs, n_inputs, views);
    if (st != PT2RT_OK) return st;
    std::vector<pt2rt::Tensor> results = runtime->runtime.run(views);
    std::vector<pt2rt_tensor*> owned;
    owned.reserve(results.size());
    try {
      for (auto& r : results) owned.push_back(new pt2rt_tensor{cuda ? r.to_cpu() : std::move(r)});
    } catch (...) {
      for (auto* t : owned) delete t;
      throw;
    }
    for (size_t i = 0; i < owned.size(); ++i) outputs[i] = owned[i];
    *n_outputs = owned.size();
    return PT2RT_OK;
  });
}

pt2rt_status pt2rt_run_into(const pt2rt_runtime* runtime, const pt2rt_tensor_view* inputs, size_t n_inputs,
                            const pt2rt_output_view* outputs, size_t n_outputs) {
  return guarded("pt2rt_run_into", [&] {
    if (runtime == nullptr) return fail(PT2RT_ERROR_USAGE, "pt2rt_run_into: runtime is NULL");
    if (n_outputs > 0 && outputs == nullptr)
      return fail(PT2RT_ERROR_USAGE, "pt2rt_run_into: outputs is NULL but n_outputs is " + std::to_string(n_outputs));
    std::vector<pt2rt::TensorView> views;
    const pt2rt_status st = input_views("pt2rt_run_into", inputs, n_inputs, views);
    if (st != PT2RT_OK) return st;
    std::vector<pt2rt::OutputView> targets;
    targets.reserve(n_outputs);
    for (size_t i = 0; i < n_outputs; ++i) {
      const pt2rt_output_view& v = outputs[i];
      const std::string who = "pt2rt_run_into: outputs[" + std::to_string(i) + "]";
      if (v.ndim > 0 && v.shape == nullptr)
        return fail(PT2RT_ERROR_USAGE, who + ".shape is NULL but ndim is " + std::to_string(v.ndim));
      if (!valid(v.dtype))
        return fail(PT2RT_ERROR_USAGE, who + ".dtype is " + std::to_string(raw_value(v.dtype)) + ", not a pt2rt_dtype");
      targets.push_back(pt2rt::OutputView{v.data, std::vector<int64_t>(v.shape, v.shape + v.ndim), kDTypes[raw_value(v.dtype)]});
    }
    runtime->runtime.run_into(views, targets);
    return PT2RT_OK;
  });
}

size_t pt2rt_num_inputs(const pt2rt_runtime* runtime) {
  return runtime ? runtime->runtime.spec().inputs.size() : 0;
}

size_t pt2rt_num_outputs(const pt2rt_runtime* runtime) {
  return runtime ? runtime->runtime.spec().outputs.size() : 0;
}

pt2rt_status pt2rt_input_spec(const pt2rt_runtime* runtime, size_t index, const char** name, pt2rt_dtype* dtype,
                              const int64_t** shape, size_t* ndim) {
  return guarded("pt2rt_input_spec", [&] { return tensor_spec(runtime, index, true, name, dtype, shape, ndim); });
}

pt2rt_status pt2rt_output_spec(const pt2rt_runtime* runtime, size_t index, const char** name, pt2rt_dtype* dtype,
                               const int64_t** shape, size_t* ndim) {
  return guarded("pt2rt_output_spec", [&] { return tensor_spec(runtime, index, false, name, dtype, shape, ndim); });
}

pt2rt_status pt2rt_input_dim_range(const pt2rt_runtime* runtime, size_t index, size_t dim, int64_t* min,
                                   int64_t* max) {
  return guarded("pt2rt_input_dim_range", [&] {
    const pt2rt::TensorSpec* spec = spec_at(runtime, index, true, "pt2rt_input_dim_range");
    if (spec == nullptr) return PT2RT_ERROR_USAGE;
    const pt2rt::TensorSpec& s = *spec;
    if (dim >= s.shape.size())
      return fail(PT2RT_ERROR_USAGE, "pt2rt_input_dim_range: input " + s.name + " has " +
                                         std::to_string(s.shape.size()) + " dims, no dim " + std::to_string(dim));
    int64_t lo = s.shape[dim], hi = s.shape[dim];
    for (const auto& d : s.dynamic_dims) {  // the range run() checks (a derived dim carries its own)
      if (static_cast<size_t>(d.dim) != dim) continue;
      lo = d.min;
      hi = d.max ? *d.max : -1;
    }
    if (min) *min = lo;
    if (max) *max = hi;
    return PT2RT_OK;
  });
}

const void* pt2rt_tensor_data(const pt2rt_tensor* tensor) { return tensor ? tensor->tensor.data() : nullptr; }

size_t pt2rt_tensor_ndim(const pt2rt_tensor* tensor) { return tensor ? tensor->tensor.shape().size() : 0; }

const int64_t* pt2rt_tensor_shape(const pt2rt_tensor* tensor) {
  return tensor ? tensor->tensor.shape().data() : nullptr;
}

pt2rt_dtype pt2rt_tensor_dtype(const pt2rt_tensor* tensor) {
  return tensor ? to_c(tensor->tensor.dtype()) : PT2RT_FLOAT32;
}

size_t pt2rt_tensor_nbytes(const pt2rt_tensor* tensor) { return tensor ? tensor->tensor.nbytes() : 0; }

void pt2rt_tensor_free(pt2rt_tensor* tensor) { delete tensor; }

pt2rt_status pt2rt_set_num_threads(int threads) {
  return guarded("pt2rt_set_num_threads", [&] {
    pt2rt::set_num_threads(threads);
    return PT2RT_OK;
  });
}

}  // extern "C"
