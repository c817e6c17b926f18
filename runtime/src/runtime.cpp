// pt2rt::Runtime: load a package safely, validate inputs, run, verify.
#include "internal.h"
#include "parsers.h"
#include "run_memory.h"

#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>

namespace pt2rt {

namespace {

// AOTInductor's loading is not safe from several threads at once: 4 of 10 runs of tests/cpp/test_loading.cpp's
// concurrent test failed inside its package loader (torch 2.13: "[json.exception.type_error.302] type must be
// string, but is null"), also with a directory of its own per load. Only the construction and destruction are
// serialized; reading, checking and extracting the package, and loading ops libraries, run in parallel.
std::mutex g_aoti_mutex;

}  // namespace

struct Runtime::Impl {
  // open for the Runtime's life (Options::keep_package_open): golden cases come from the same file; else null, and
  // the file is opened again when golden cases are read, if it is still the one loaded
  std::unique_ptr<detail::Package> package;
  std::string package_path;  // loaded from memory: a name for messages
  bool from_memory = false;
  std::vector<char> golden;  // loaded from memory with keep_package_open: the golden record's bytes
  detail::Limits limits{};
  detail::FileIdentity identity;
  Spec spec;
  std::vector<std::string> libraries;
  size_t variant = 0;  // index into spec.variants
  int device_index = -1;  // CUDA packages: Options::device_index
  int intra_op_threads = 0;  // Options::intra_op_threads
  std::shared_ptr<detail::Extraction> extracted;  // the variant's files; AOTInductor loads from there
  std::unique_ptr<torch::inductor::AOTIModelContainerRunner> runner;
  std::unique_ptr<detail::RunMemory> run_memory;  // Options::reuse_run_memory; null when off
  // The first run that succeeds runs alone: a model container's first runs set up its constants, and torch 2.11's
  // first two concurrent runs deadlocked there (one held the only model while it waited to set them up, the other
  // held the lock while it waited for a model: Pt2run.BenchWarmsUpOnTheThreadsItMeasures hung in half its runs).
  mutable std::mutex first_run_mutex;
  mutable std::atomic<bool> first_run_done{false};

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(g_aoti_mutex);
      runner.reset();  // before the files it was loaded from go
    }
    extracted.reset();
  }
};

// The library's own name for Runtime::Impl (private in the public header).
struct detail::RuntimeAccess {
  using Impl = Runtime::Impl;
};
using RuntimeImpl = detail::RuntimeAccess::Impl;

namespace {

const char* kVersion = PT2RT_VERSION;


double magnitude(const at::Tensor& t) {
  const at::Tensor m = t.abs().masked_select(at::isfinite(t));
  return m.numel() ? m.max().item<double>() : 0.0;
}

bool close_enough(const at::Tensor& actual, const at::Tensor& expected, const Tolerance& tol, bool fixed_atol,
                  double& max_abs, double& max_rel, double& max_scaled) {
  const at::Tensor a = actual.to(at::kCPU, at::kDouble), e = expected.to(at::kCPU, at::kDouble);
  if (a.numel() == 0) return true;
  const at::Tensor diff = (a - e).abs();
  const at::Tensor finite = at::isfinite(diff);
  const double scale = std::max(magnitude(e), magnitude(a));
  if (finite.any().item<bool>()) {
    const double worst = diff.masked_select(finite).max().item<double>();
    max_abs = std::max(max_abs, worst);
    const at::Tensor rel = diff / e.abs().clamp_min(std::numeric_limits<double>::min());
    max_rel = std::max(max_rel, rel.masked_select(finite).max().item<double>());
    max_scaled = std::max(max_scaled, scale > 0 ? worst / scale : 0.0);
  }
  // Integers and bools compare exactly, whatever the table says, and in their own type: through double, int64
  // values above 2^53 that differ could compare equal.
  if (!at::isFloatingType(expected.scalar_type())) return at::equal(actual.cpu(), expected.cpu());
  const double atol = tol.atol_rel && !fixed_atol ? *tol.atol_rel * scale : tol.atol;
  return at::allclose(a, e, tol.rtol, atol, /*equal_nan=*/true);
}

}  // namespace

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::Runtime(Runtime&&) noexcept = default;
Runtime& Runtime::operator=(Runtime&&) noexcept = default;
Runtime::~Runtime() = default;

Spec Runtime::read_spec(const std::string& package_path) {
  return detail::Package(package_path, detail::limits_of(Options{})).spec();
}

namespace {


// Everything of a load after the package is open: spec, variant, host checks, extraction, ops libraries, model.
void load_opened(RuntimeImpl& impl, const Options& options) {
  impl.device_index = options.device_index;
  impl.intra_op_threads = options.intra_op_threads;
  if (options.intra_op_threads > 0) detail::check_run_threads();
  const std::string& package_path = impl.package_path;
  impl.spec = impl.package->spec();
  const Spec& spec = impl.spec;

  try {
    impl.variant = select_variant(spec, options.cpu_isa);
  } catch (const Error& e) {
    throw Error(e.code(), package_path + ": " + e.what());
  }
  const Variant& variant = spec.variants[impl.variant];
  detail::check_host(spec, options);
  // Extracted (and its library's hash checked) before any ops library or model code is loaded.
  impl.extracted = detail::extract_variant(*impl.package, variant, options);
  impl.libraries = detail::load_ops_libraries(spec, impl.from_memory ? "" : package_path, options);
  detail::check_registered(spec, impl.libraries);

  // The model library straight into AOTInductor's runner for the device, as its package loader does after reading
  // the package: every supported torch has the same runner interface, while package loaders differ (torch 2.11's
  // reads archives only, 2.13's also a folder). Custom objects and the proxy executor's json lie next to the library.
  const std::string device_type = spec.device == Device::CUDA ? "cuda" : "cpu";
  try {
    std::lock_guard<std::mutex> lock(g_aoti_mutex);
    auto& runners = torch::inductor::getAOTIModelRunnerRegistry();
    const auto create = runners.find(device_type);
    if (create == runners.end()) {
      throw Error(ErrorCode::Package, package_path + ": this libtorch has no AOTInductor runner for " + device_type);
    }
    const std::string device = device_type == "cuda" && options.device_index >= 0
                                   ? "cuda:" + std::to_string(options.device_index)
                                   : device_type;
    impl.runner = create->second(impl.extracted->dir + "/" + variant.record, static_cast<size_t>(options.num_runners),
                                 device, impl.extracted->dir + "/data/aotinductor/" + variant.model,
                                 /*run_single_threaded=*/false);
  } catch (const Error&) {
    throw;  // ~Impl removes the temporary directory
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Package, "AOTInductor cannot load " + package_path + ": " + detail::short_what(e));
  }
  if (options.reuse_run_memory && detail::install_run_allocator()) {
    impl.run_memory = std::make_unique<detail::RunMemory>();
  }
}

}  // namespace

Runtime Runtime::load(const std::string& package_path, const Options& options) {
  return Runtime(detail::load_path<Impl>(package_path, options, load_opened));
}

Runtime Runtime::load_from_memory(const void* bytes, std::size_t size, const Options& options) {
  return Runtime(detail::load_memory<Impl>(bytes, size, options, load_opened));
}

namespace {

// Torch 2.11's runner returns from a model that failed with outputs it never set, and keeps the reason to itself.
std::vector<at::Tensor> checked(std::vector<at::Tensor> outputs) {
  for (const auto& t : outputs) {
    if (!t.defined()) {
      throw Error(ErrorCode::Runtime, std::string("the model failed (the AOTInductor of torch ") + torch_version() +
                                          " does not say why)");
    }
  }
  return outputs;
}

// The model's outputs as AOTInductor returns them: they may alias the inputs (borrowed into args, which the caller
// keeps while it looks at the outputs), constants, each other.
std::vector<at::Tensor> run_model(const RuntimeImpl& impl, const std::vector<TensorView>& inputs,
                                  std::vector<at::Tensor>& args, bool validated = false) {
  if (!validated) detail::validate_inputs(impl.spec, inputs, torch::cuda::is_available());
  args.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor t = detail::borrow(inputs[i]);
    if (inputs[i].device != impl.spec.device) {
      // one policy for every caller (C++, C, pt2run, pt2serve): inputs go to the package's device here
      const c10::Device target = impl.spec.device == Device::CUDA
                                     ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(impl.device_index))
                                     : c10::Device(c10::kCPU);
      try {
        t = t.to(target);
      } catch (const std::exception& e) {
        throw Error(ErrorCode::Input, "input " + std::to_string(i) + " (" + impl.spec.inputs[i].name +
                                          "): cannot copy it to " + device_name(impl.spec.device) + ": " +
                                          detail::short_what(e));
      }
    }
    args.push_back(std::move(t));
  }
  detail::apply_num_threads();
  const detail::RunThreads threads(impl.intra_op_threads);
  try {
    c10::InferenceMode inference;  // inference only: no autograd bookkeeping in the model's fallback ops
    if (!impl.first_run_done.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> alone(impl.first_run_mutex);
      if (!impl.first_run_done.load(std::memory_order_relaxed)) {
        std::vector<at::Tensor> outputs = checked(impl.runner->run(args));
        impl.first_run_done.store(true, std::memory_order_release);
        return outputs;
      }
    }
    return checked(impl.runner->run(args));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Runtime, "the model failed: " + detail::short_what(e));
  }
}

}  // namespace

std::vector<Tensor> Runtime::run(const std::vector<TensorView>& inputs) const {
  const detail::RunMemory::Scope reuse(impl_->run_memory.get());
  std::vector<at::Tensor> args;
  std::vector<at::Tensor> outs = run_model(*impl_, inputs, args);
  std::vector<Tensor> result;
  result.reserve(outs.size());
  for (auto& out : outs) {
    at::Tensor t = std::move(out);
    // Outputs are the caller's alone. A model may return a view of an input (the caller's memory, borrowed above),
    // a constant as it is (memory of the model), one tensor twice, or a buffer it keeps: each is copied. Memory
    // that no allocator gave (from_blob: inputs, constants) has no deleter; shared tensors or storages have more
    // than one reference. An output the model made for this run alone is handed out without a copy.
    const bool not_own = t.defined() && (t.use_count() > 1 || t.storage().use_count() > 1 ||
                                         t.storage().data_ptr().get_deleter() == nullptr);
    if (not_own) t = t.clone(at::MemoryFormat::Contiguous);
    result.push_back(detail::wrap(std::move(t)));
  }
  return result;
}

void Runtime::run_into(const std::vector<TensorView>& inputs, const std::vector<OutputView>& outputs) const {
  const Spec& spec = impl_->spec;
  detail::validate_inputs(spec, inputs, torch::cuda::is_available());
  detail::check_output_views(spec, inputs, outputs);
  const detail::RunMemory::Scope reuse(impl_->run_memory.get());  // ends after the model's outputs are freed
  std::vector<at::Tensor> args;
  const std::vector<at::Tensor> outs = run_model(*impl_, inputs, args, /*validated=*/true);
  if (outs.size() != outputs.size()) {
    throw Error(ErrorCode::Runtime, "the model returned " + std::to_string(outs.size()) + " outputs, its spec names " +
                                        std::to_string(outputs.size()));
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].sizes() != at::IntArrayRef(outputs[i].shape)) {
      throw Error(ErrorCode::Usage, "run_into: output " + std::to_string(i) + " (" + spec.outputs[i].name + ") is " +
                                        detail::shape_str(outs[i].sizes().vec()) + " for these inputs, the view is " +
                                        detail::shape_str(outputs[i].shape) + "; nothing was written");
    }
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    const OutputView& o = outputs[i];
    if (outs[i].numel() == 0) continue;
    const auto device = o.device == Device::CUDA ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(o.device_index))
                                                 : c10::Device(c10::kCPU);
    at::Tensor target = at::from_blob(o.data, o.shape, at::TensorOptions().dtype(detail::to_scalar_type(o.dtype)).device(device));
    target.copy_(outs[i]);
  }
}

const Spec& Runtime::spec() const { return impl_->spec; }
const std::vector<std::string>& Runtime::ops_libraries() const { return impl_->libraries; }
const Variant& Runtime::variant() const { return impl_->spec.variants[impl_->variant]; }



namespace {

// The golden cases of the package that was loaded: through the file held open, else the path opened again if it
// still is that file.
detail::Golden golden_of(const RuntimeImpl& impl) {
  return detail::parse_golden(detail::golden_record(impl.package.get(), impl.from_memory, impl.golden, impl.package_path,
                                                    impl.identity, impl.limits, impl.spec),
                              impl.package_path);
}

}  // namespace

std::vector<Tensor> Runtime::example_inputs() const {
  const detail::Golden golden = golden_of(*impl_);
  std::vector<Tensor> out;
  for (const auto& t : golden.inputs.front()) out.push_back(detail::wrap(t).to(impl_->spec.device));
  return out;
}

VerifyReport Runtime::verify() const {
  const Spec& spec = impl_->spec;
  const detail::Golden golden = golden_of(*impl_);
  const auto& names = golden.names;
  const auto& inputs = golden.inputs;
  const auto& outputs = golden.outputs;
  const bool cuda = spec.device == Device::CUDA;
  VerifyReport report;
  for (size_t c = 0; c < names.size(); ++c) {
    CaseReport r;
    r.name = names[c];
    // Shapes and dtypes checked before any copy: a stride-0 tensor in the golden record can claim any size.
    try {
      std::vector<TensorView> shapes;
      for (const auto& t : inputs[c]) {
        const auto dtype = detail::from_scalar_type(t.scalar_type());
        if (!dtype) throw Error(ErrorCode::Input, "a golden input has the unsupported dtype " + std::string(c10::toString(t.scalar_type())));
        shapes.push_back(TensorView{&r, t.sizes().vec(), *dtype, cuda ? Device::CUDA : Device::CPU});
      }
      detail::validate_inputs(spec, shapes, torch::cuda::is_available(), /*values=*/false);
    } catch (const Error& e) {
      r.reason = e.what();
      report.cases.push_back(r);
      continue;
    }
    std::vector<at::Tensor> in;
    for (const auto& t : inputs[c]) in.push_back(cuda ? t.cuda().contiguous() : t.contiguous());
    std::vector<TensorView> views;
    for (const auto& t : in) views.push_back(detail::wrap(t).view());
    std::vector<Tensor> actual;
    try {
      actual = run(views);
    } catch (const Error& e) {
      r.reason = e.what();
      report.cases.push_back(r);
      continue;
    }
    const auto& expected = outputs[c];
    r.passed = actual.size() == expected.size();
    if (!r.passed) r.reason = "expected " + std::to_string(expected.size()) + " outputs, got " + std::to_string(actual.size());
    for (size_t o = 0; r.passed && o < expected.size(); ++o) {
      const at::Tensor& e = expected[o];
      const at::Tensor& a = detail::TensorAccess::aten(actual[o]);
      if (a.sizes() != e.sizes() || a.scalar_type() != e.scalar_type()) {
        r.passed = false;
        r.reason = "output " + std::to_string(o) + ": expected " + c10::toString(e.scalar_type()) + " " +
                   detail::shape_str(e.sizes().vec()) + ", got " + c10::toString(a.scalar_type()) + " " +
                   detail::shape_str(a.sizes().vec());
        break;
      }
      bool fixed = false;
      const Tolerance tol = detail::output_tolerance(spec, detail::from_scalar_type(e.scalar_type()), o, fixed);
      if (!close_enough(a, e, tol, fixed, r.max_abs_error, r.max_rel_error, r.max_scaled_error)) {
        r.passed = false;
        r.reason = detail::differs_reason(o, tol, fixed);
      }
    }
    report.cases.push_back(r);
  }
  return report;
}

const char* version() { return kVersion; }
bool is_lite() { return false; }

}  // namespace pt2rt
