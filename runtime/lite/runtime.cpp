// pt2rt::Runtime in pt2rt-lite: a package's lite variant (export --lite) loaded and run without libtorch. The
// package is read, checked and extracted by the code the full runtime uses (runtime/src); the model library is
// loaded by dlopen and runs through AOTInductor's model container, its shim calls answered by this library.
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>

#include "../src/common.h"
#include "lite_tensor.h"
#include "ops_libraries.h"
#include "shim.h"
#include "tensor.h"
#include "torch_file.h"

namespace pt2rt {

namespace {

const char* kVersion = PT2RT_VERSION;

// AOTInductor's model container, as its interface.h declares it (C functions of the model library).
using ContainerHandle = void*;
using CreateFn = int32_t (*)(ContainerHandle*, size_t, const char*, const char*);
using DeleteFn = int32_t (*)(ContainerHandle);
using RunFn = int32_t (*)(ContainerHandle, AtenTensorHandle*, size_t, AtenTensorHandle*, size_t, void*, void*);
using NumOutputsFn = int32_t (*)(ContainerHandle, size_t*);  // also GetNumInputs

std::atomic<int> g_threads{0};          // set_num_threads; 0: OpenMP's default
std::atomic<int> g_threads_setting{0};  // counts the settings: a thread applies each once

void apply_num_threads() {
  thread_local int applied = -1;
  const int setting = g_threads_setting.load(std::memory_order_acquire);
  if (applied == setting) return;
  applied = setting;
  const int n = g_threads.load(std::memory_order_relaxed);
  if (n > 0) omp_set_num_threads(n);
}

// Every shim function referenced: a program linked with libpt2rt.a keeps them (and exports them by the static
// library's --export-dynamic-symbol), though only the model library calls them.
#define PT2RT_LITE_SHIM_ADDRESS(name) reinterpret_cast<const void*>(&pt2rt_lite_##name),
[[gnu::used]] const void* const kShimFunctions[] = {PT2RT_LITE_SHIM_FUNCTIONS(PT2RT_LITE_SHIM_ADDRESS)
                                                   reinterpret_cast<const void*>(&pt2rt_lite_set_error),
                                                   reinterpret_cast<const void*>(&pt2rt_lite_empty_like),
                                                   reinterpret_cast<const void*>(&pt2rt_lite_parallel_for)};
#undef PT2RT_LITE_SHIM_ADDRESS

// The model library resolves the shim's names in the process's global scope: this library is put there (once),
// also when the program loaded it privately (a plugin host's dlopen with RTLD_LOCAL).
void make_shim_global() {
  static std::once_flag once;
  std::call_once(once, [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&pt2rt_lite_aoti_torch_empty_strided), &info) != 0 && info.dli_fname) {
      dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);  // no new reference: it is loaded already
    }
  });
}

}  // namespace

struct Runtime::Impl {
  std::unique_ptr<detail::Package> package;  // Options::keep_package_open
  std::string package_path;
  bool from_memory = false;
  std::vector<char> golden;
  detail::Limits limits{};
  detail::FileIdentity identity;
  Spec spec;
  std::vector<std::string> libraries;  // the ops libraries' lite builds loaded for it
  size_t variant = 0;                  // index into spec.lite_variants
  std::shared_ptr<detail::Extraction> extracted;
  void* library = nullptr;
  ContainerHandle container = nullptr;
  DeleteFn destroy = nullptr;
  RunFn run = nullptr;
  size_t num_outputs = 0;
  int intra_op_threads = 0;  // Options::intra_op_threads

  ~Impl() {
    if (container) destroy(container);
    lite::trim_pool();  // the sizes this model ran with are not the next one's
    // the library stays mapped (its generated C++ has GNU-unique symbols, which keep glibc from unloading it), as
    // in the full runtime; its files go
    extracted.reset();
  }
};

// The library's own name for Runtime::Impl (private in the public header).
struct detail::RuntimeAccess {
  using Impl = Runtime::Impl;
};
using RuntimeImpl = detail::RuntimeAccess::Impl;

namespace {


template <class F>
F symbol(void* library, const char* name, const std::string& path) {
  void* f = dlsym(library, name);
  if (f == nullptr) throw Error(ErrorCode::Package, path + ": its lite model library has no " + name);
  return reinterpret_cast<F>(f);
}

void load_opened(RuntimeImpl& impl, const Options& options) {
  const std::string& path = impl.package_path;
  impl.intra_op_threads = options.intra_op_threads;
  impl.spec = impl.package->spec();
  const Spec& spec = impl.spec;
  if (spec.device != Device::CPU) {
    throw Error(ErrorCode::Package, path + " is a " + device_name(spec.device) + " package; pt2rt-lite runs CPU packages");
  }
  if (spec.lite_variants.empty()) {
    throw Error(ErrorCode::Package, path + " has no lite variants: export it with --lite to run it without libtorch");
  }
  // the recurrent layers' ops are lite's own (rnn.cpp); other ops come from their ops libraries' lite builds
  make_shim_global();  // which resolve the shim's names as the model library does
  impl.libraries = lite::load_ops_libraries(spec, impl.from_memory ? "" : path, options);
  Spec lite = spec;  // select_variant chooses among a spec's variants
  lite.variants = spec.lite_variants;
  impl.variant = select_variant(lite, options.cpu_isa);
  const Variant& variant = spec.lite_variants[impl.variant];
  impl.extracted = detail::extract_variant(*impl.package, variant, options);
  const std::string file = impl.extracted->dir + "/" + variant.record;
  impl.library = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (impl.library == nullptr) {
    const char* why = dlerror();
    throw Error(ErrorCode::Package, path + ": its lite model library (variant " + variant.isa + ") does not load: " +
                                        (why ? why : "?"));
  }
  const auto create = symbol<CreateFn>(impl.library, "AOTInductorModelContainerCreateWithDevice", path);
  impl.destroy = symbol<DeleteFn>(impl.library, "AOTInductorModelContainerDelete", path);
  impl.run = symbol<RunFn>(impl.library, "AOTInductorModelContainerRun", path);
  const auto num_outputs = symbol<NumOutputsFn>(impl.library, "AOTInductorModelContainerGetNumOutputs", path);
  const auto num_inputs = symbol<NumOutputsFn>(impl.library, "AOTInductorModelContainerGetNumInputs", path);
  ContainerHandle container = nullptr;
  if (create(&container, static_cast<size_t>(options.num_runners), "cpu", nullptr) != 0 || container == nullptr) {
    throw Error(ErrorCode::Package, path + ": its lite model did not start: " + pt2rt_lite_shim_last_error());
  }
  impl.container = container;
  if (num_outputs(container, &impl.num_outputs) != 0 || impl.num_outputs != spec.outputs.size()) {
    throw Error(ErrorCode::Package, path + ": its lite model has " + std::to_string(impl.num_outputs) +
                                        " outputs, its spec names " + std::to_string(spec.outputs.size()));
  }
  // the container takes its inputs over only when their number is right: checked once here
  size_t inputs = 0;
  if (num_inputs(container, &inputs) != 0 || inputs != spec.inputs.size()) {
    throw Error(ErrorCode::Package, path + ": its lite model has " + std::to_string(inputs) +
                                        " inputs, its spec names " + std::to_string(spec.inputs.size()));
  }
}

// A contiguous pt2rt::Tensor of a shim tensor: its storage taken over when the run made it for this output alone,
// else copied (a view of an input, a constant, a storage two outputs share).
Tensor take_output(lite::ShimTensor* t) {
  const auto dtype = detail::dtype_of_code(t->dtype);
  if (!dtype) throw Error(ErrorCode::Runtime, "the model returned a tensor of dtype code " + std::to_string(t->dtype));
  const std::size_t item = dtype_size(*dtype);
  if (t->storage->owned && t->storage.use_count() == 1 && t->is_contiguous()) {
    return detail::TensorAccess::make(t->data(), std::shared_ptr<void>(t->storage), t->sizes, *dtype,
                                      static_cast<std::size_t>(t->numel()) * item);
  }
  Tensor out = detail::new_tensor(t->sizes, *dtype);
  lite::ShimTensor dst;  // a view of out's memory
  dst.storage = std::make_shared<lite::Storage>();
  dst.storage->data = out.mutable_data();
  dst.storage->nbytes = out.nbytes();
  dst.dtype = t->dtype;
  dst.sizes = t->sizes;
  dst.strides = lite::contiguous_strides(t->sizes);
  lite::copy_strided(dst, *t);
  return out;
}

std::vector<Tensor> run_model(const RuntimeImpl& impl, const std::vector<TensorView>& inputs) {
  std::vector<AtenTensorHandle> in(inputs.size(), nullptr);
  auto free_inputs = [&] {
    for (auto h : in)
      if (h) pt2rt_lite_aoti_torch_delete_tensor_object(h);
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorView& v = inputs[i];
    const std::vector<int64_t> strides = lite::contiguous_strides(v.shape);
    if (pt2rt_lite_aoti_torch_create_tensor_from_blob(const_cast<void*>(v.data), static_cast<int64_t>(v.shape.size()),
                                                      v.shape.data(), strides.data(), 0, detail::dtype_code(v.dtype),
                                                      lite::kDeviceCpu, 0, &in[i]) != 0) {
      free_inputs();
      throw Error(ErrorCode::Input, "input " + std::to_string(i) + ": " + pt2rt_lite_shim_last_error());
    }
  }
  apply_num_threads();
  const detail::RunThreads threads(impl.intra_op_threads);
  std::vector<AtenTensorHandle> out(impl.num_outputs, nullptr);
  lite::set_last_error("");
  // the container takes the input handles over (it frees them), also when the run fails
  if (impl.run(impl.container, in.data(), in.size(), out.data(), out.size(), nullptr, nullptr) != 0) {
    for (auto h : out)
      if (h) pt2rt_lite_aoti_torch_delete_tensor_object(h);
    const std::string why = pt2rt_lite_shim_last_error();
    throw Error(ErrorCode::Runtime, "the model failed: " + (why.empty() ? std::string("see its message on stderr") : why));
  }
  std::vector<Tensor> result;
  result.reserve(out.size());
  try {
    for (auto h : out) result.push_back(take_output(lite::as_tensor(h)));
  } catch (...) {
    for (auto h : out) pt2rt_lite_aoti_torch_delete_tensor_object(h);
    throw;
  }
  for (auto h : out) pt2rt_lite_aoti_torch_delete_tensor_object(h);
  return result;
}

}  // namespace

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;
Runtime::~Runtime() = default;

Spec Runtime::read_spec(const std::string& package_path) {
  return detail::Package(package_path, detail::limits_of(Options{})).spec();
}

Runtime Runtime::load(const std::string& package_path, const Options& options) {
  return Runtime(detail::load_path<Impl>(package_path, options, load_opened));
}

Runtime Runtime::load_from_memory(const void* bytes, std::size_t size, const Options& options) {
  return Runtime(detail::load_memory<Impl>(bytes, size, options, load_opened));
}

namespace {

// The checks the full runtime makes before a run: against the spec (lite has no CUDA), then each shape's byte size
void check_before_run(const Spec& spec, const std::vector<TensorView>& inputs) {
  detail::validate_inputs(spec, inputs, /*cuda_available=*/false);
  for (const auto& v : inputs) detail::check_shape(v, "tensor view");
}

}  // namespace

std::vector<Tensor> Runtime::run(const std::vector<TensorView>& inputs) const {
  check_before_run(impl_->spec, inputs);
  return run_model(*impl_, inputs);
}

void Runtime::run_into(const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs) const {
  const Spec& spec = impl_->spec;
  check_before_run(spec, inputs);
  detail::check_output_views(spec, inputs, outputs);
  const std::vector<Tensor> outs = run_model(*impl_, inputs);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].shape() != outputs[i].shape) {
      throw Error(ErrorCode::Usage, "run_into: output " + std::to_string(i) + " (" + spec.outputs[i].name + ") is " +
                                        detail::shape_str(outs[i].shape()) + " for these inputs, the view is " +
                                        detail::shape_str(outputs[i].shape) + "; nothing was written");
    }
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].nbytes()) std::memcpy(outputs[i].data, outs[i].data(), outs[i].nbytes());
  }
}

const Spec& Runtime::spec() const { return impl_->spec; }
const std::vector<std::string>& Runtime::ops_libraries() const { return impl_->libraries; }
const Variant& Runtime::variant() const { return impl_->spec.lite_variants[impl_->variant]; }

namespace {

struct Golden {
  std::vector<std::string> names;
  std::vector<std::vector<Tensor>> inputs, outputs;
};

Golden golden_of(const RuntimeImpl& impl) {
  const std::vector<char> bytes = detail::golden_record(impl.package.get(), impl.from_memory, impl.golden,
                                                        impl.package_path, impl.identity, impl.limits, impl.spec);
  const std::string what = impl.package_path + ": its golden cases are damaged";
  lite::ValuePtr v;
  try {
    v = lite::load(bytes.data(), bytes.size(), static_cast<std::size_t>(impl.limits.max_record_bytes));
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Package, what + " (" + e.what() + ")");
  }
  auto field = [&](const char* key) -> const lite::Value& {
    if (v->kind == lite::Value::Kind::Dict)
      for (const auto& [k, val] : v->entries)
        if (k->kind == lite::Value::Kind::String && k->s == key) return *val;
    throw Error(ErrorCode::Package, what + " (no " + key + ")");
  };
  Golden g;
  for (const auto& n : field("names").items) {
    if (n->kind != lite::Value::Kind::String) throw Error(ErrorCode::Package, what + " (a name is not a string)");
    g.names.push_back(n->s);
  }
  auto cases = [&](const char* key, std::vector<std::vector<Tensor>>& out) {
    for (const auto& c : field(key).items) {
      out.emplace_back();
      for (const auto& t : c->items) {
        if (t->kind != lite::Value::Kind::Tensor) throw Error(ErrorCode::Package, what + " (a case holds a non-tensor)");
        out.back().push_back(*t->tensor);
      }
    }
  };
  cases("inputs", g.inputs);
  cases("outputs", g.outputs);
  if (g.inputs.size() != g.names.size() || g.outputs.size() != g.names.size() || g.names.empty()) {
    throw Error(ErrorCode::Package, what + " (names, inputs and outputs differ in number)");
  }
  return g;
}

// The element at i as a double (integers exactly where they fit, which the comparison below needs only for floats).
double element(const Tensor& t, std::size_t i) {
  const void* p = t.data();
  switch (t.dtype()) {
    case DType::Float32: return static_cast<const float*>(p)[i];
    case DType::Float64: return static_cast<const double*>(p)[i];
    case DType::Float16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
      const int e = (h >> 10) & 31, m = h & 1023;
      const double sign = (h >> 15) ? -1.0 : 1.0;
      if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
      return sign * (e ? std::ldexp(1024 + m, e - 25) : std::ldexp(m, -24));
    }
    case DType::BFloat16: {
      uint16_t b;
      std::memcpy(&b, static_cast<const char*>(p) + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::Int64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::Int32: return static_cast<const int32_t*>(p)[i];
    case DType::Int16: return static_cast<const int16_t*>(p)[i];
    case DType::Int8: return static_cast<const int8_t*>(p)[i];
    case DType::UInt8: return static_cast<const uint8_t*>(p)[i];
    case DType::Bool: return static_cast<const bool*>(p)[i];
  }
  return 0;
}

bool is_float(DType d) {
  return d == DType::Float32 || d == DType::Float64 || d == DType::Float16 || d == DType::BFloat16;
}

// As the full runtime compares (torch.allclose with equal_nan, atol' = atol_rel x the largest finite |value|).
bool close_enough(const Tensor& a, const Tensor& e, const Tolerance& tol, bool fixed_atol, CaseReport& r) {
  const std::size_t n = static_cast<std::size_t>(e.numel());
  if (n == 0) return true;
  if (!is_float(e.dtype())) return std::memcmp(a.data(), e.data(), e.nbytes()) == 0;
  double scale = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (double x : {element(a, i), element(e, i)})
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  }
  const double atol = tol.atol_rel && !fixed_atol ? *tol.atol_rel * scale : tol.atol;
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = element(a, i), y = element(e, i), diff = std::fabs(x - y);
    if (std::isfinite(diff)) {
      r.max_abs_error = std::max(r.max_abs_error, diff);
      r.max_rel_error = std::max(r.max_rel_error, diff / std::max(std::fabs(y), std::numeric_limits<double>::min()));
      r.max_scaled_error = std::max(r.max_scaled_error, scale > 0 ? diff / scale : 0.0);
    }
    if (std::isnan(x) || std::isnan(y)) {
      ok &= std::isnan(x) && std::isnan(y);
    } else if (std::isinf(x) || std::isinf(y)) {
      ok &= x == y;
    } else {
      ok &= diff <= atol + tol.rtol * std::fabs(y);
    }
  }
  return ok;
}

}  // namespace

VerifyReport Runtime::verify() const {
  const Spec& spec = impl_->spec;
  const Golden golden = golden_of(*impl_);
  VerifyReport report;
  for (size_t c = 0; c < golden.names.size(); ++c) {
    CaseReport r;
    r.name = golden.names[c];
    std::vector<TensorView> views;
    for (const auto& t : golden.inputs[c]) views.push_back(t.view());
    std::vector<Tensor> actual;
    try {
      actual = run(views);
    } catch (const Error& e) {
      r.reason = e.what();
      report.cases.push_back(r);
      continue;
    }
    const auto& expected = golden.outputs[c];
    r.passed = actual.size() == expected.size();
    if (!r.passed) r.reason = "expected " + std::to_string(expected.size()) + " outputs, got " + std::to_string(actual.size());
    for (size_t o = 0; r.passed && o < expected.size(); ++o) {
      const Tensor& e = expected[o];
      const Tensor& a = actual[o];
      if (a.shape() != e.shape() || a.dtype() != e.dtype()) {
        r.passed = false;
        r.reason = "output " + std::to_string(o) + ": expected " + dtype_name(e.dtype()) + " " +
                   detail::shape_str(e.shape()) + ", got " + dtype_name(a.dtype()) + " " + detail::shape_str(a.shape());
        break;
      }
      bool fixed = false;
      const Tolerance tol = detail::output_tolerance(spec, e.dtype(), o, fixed);
      if (!close_enough(a, e, tol, fixed, r)) {
        r.passed = false;
        r.reason = detail::differs_reason(o, tol, fixed);
      }
    }
    report.cases.push_back(r);
  }
  return report;
}

std::vector<Tensor> Runtime::example_inputs() const { return golden_of(*impl_).inputs.front(); }

// Tensors ---------------------------------------------------------------------------------------------------

namespace detail {

Tensor new_tensor(const std::vector<int64_t>& shape, DType dtype) {
  check_shape(TensorView{nullptr, shape, dtype}, "tensor");
  std::size_t bytes = dtype_size(dtype);
  for (int64_t d : shape) bytes *= static_cast<std::size_t>(d);
  void* data = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + (bytes == 0 ? 64 : 0));
  if (data == nullptr) throw Error(ErrorCode::Runtime, "out of memory for a tensor of " + std::to_string(bytes) + " bytes");
  return TensorAccess::make(data, std::shared_ptr<void>(data, std::free), shape, dtype, bytes);
}

std::string short_what(const std::exception& e) {
  std::string text = e.what();
  const auto nl = text.find('\n');
  if (nl != std::string::npos) text.resize(nl);
  return text;
}

}  // namespace detail

Tensor::Tensor() : impl_(std::make_shared<Impl>()) {}
Tensor::Tensor(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tensor Tensor::copy_of(const TensorView& view) {
  detail::check_shape(view, "Tensor::copy_of");
  if (view.device != Device::CPU) throw Error(ErrorCode::Input, "Tensor::copy_of: pt2rt-lite has CPU tensors only");
  Tensor t = detail::new_tensor(view.shape, view.dtype);
  if (t.nbytes() != 0) {
    if (view.data == nullptr) throw Error(ErrorCode::Usage, "Tensor::copy_of: the view's data is null");
    std::memcpy(t.mutable_data(), view.data, t.nbytes());
  }
  return t;
}

const void* Tensor::data() const { return impl_->data; }
void* Tensor::mutable_data() { return impl_->data; }
const std::vector<int64_t>& Tensor::shape() const { return impl_->shape; }
DType Tensor::dtype() const { return impl_->dtype; }
Device Tensor::device() const { return Device::CPU; }
int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : impl_->shape) n *= d;
  return n;
}
std::size_t Tensor::nbytes() const { return impl_->nbytes; }
TensorView Tensor::view() const { return TensorView{impl_->data, impl_->shape, impl_->dtype, Device::CPU, 0}; }
Tensor Tensor::to_cpu() const { return *this; }
Tensor Tensor::to(Device device, int) const {
  if (device == Device::CPU) return *this;
  throw Error(ErrorCode::Input, "cannot copy a tensor to cuda: pt2rt-lite runs on the CPU");
}

std::vector<Tensor> load_tensors(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::IO, "cannot read tensor file " + path + ": " + std::strerror(errno));
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  lite::ValuePtr v;
  try {
    v = lite::load(bytes.data(), bytes.size(), max_bytes);
  } catch (const lite::BoundExceeded& e) {
    throw Error(ErrorCode::IO, path + " holds tensors of " + e.what() + " bytes once made contiguous; at most " +
                                   std::to_string(max_bytes) + " are accepted here");
  } catch (const std::exception& e) {
    throw Error(ErrorCode::IO, path + " is not a tensor file written by torch.save (zip format): " + e.what());
  }
  std::vector<Tensor> out;
  auto add = [&](const lite::Value& x) {
    if (x.kind != lite::Value::Kind::Tensor) throw Error(ErrorCode::IO, path + " holds something else than tensors");
    out.push_back(*x.tensor);
  };
  if (v->kind == lite::Value::Kind::Tensor) {
    add(*v);
  } else if (v->kind == lite::Value::Kind::List || v->kind == lite::Value::Kind::Tuple) {
    for (const auto& x : v->items) add(*x);
  } else {
    throw Error(ErrorCode::IO, path + " holds something else than a tensor or a list of tensors");
  }
  return out;
}

void save_tensors(const std::string& path, const std::vector<Tensor>& tensors) {
  const std::vector<char> bytes = lite::save(tensors);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorCode::IO, "cannot write " + path + ": " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error(ErrorCode::IO, "cannot write " + path + ": " + std::strerror(errno));
}

// Process-wide ----------------------------------------------------------------------------------------------

const char* version() { return kVersion; }
const char* torch_version() { return "none (pt2rt-lite)"; }
bool is_lite() { return true; }

void set_num_threads(int threads) {
  detail::check_intra_op_threads(threads, "set_num_threads: threads");
  g_threads.store(threads, std::memory_order_relaxed);
  g_threads_setting.fetch_add(1, std::memory_order_release);
}

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

void detail::check_run_threads() {}  // lite is built with its OpenMP runtime

detail::RunThreads::RunThreads(int threads) {
  if (threads <= 0) return;
  changed_ = true;
  previous_ = omp_get_max_threads();
  omp_set_num_threads(threads);
}

detail::RunThreads::~RunThreads() {
  if (changed_) omp_set_num_threads(previous_);
}

}  // namespace pt2rt
