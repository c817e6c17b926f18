// Kernel benchmarks (Google Benchmark): each op next to its baseline, measured in the same run.
//   IdentityOp/<dtype>/<MiB>       vs Clone/<dtype>/<MiB>                  (memory bandwidth)
//   ClassForward/<shape>/<dtype>   vs AtenConv/<nchw|channels_last>/...    (depthwise conv, stride 1, same padding)
//                                  and CloneInput/<shape>/<dtype>          (memory roofline of the conv)
// The ops library is dlopen'ed as the runtime does; the class is called through TorchScript's custom-class
// registry, as an exported model calls it. --device cuda runs the same set on a GPU (copy, cuDNN).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <benchmark/benchmark.h>
#include <torch/custom_class.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <dlfcn.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

at::Device g_device = at::kCPU;

// Through c10's device interface: no CUDA headers needed, and a CPU build has nothing to wait for.
void sync() {
  if (g_device.is_cuda()) {
    c10::impl::getDeviceGuardImpl(g_device.type())->synchronizeDevice(g_device.has_index() ? g_device.index() : 0);
  }
}

struct DTypeArg {
  const char* name;
  at::ScalarType type;
};
constexpr DTypeArg kDTypes[] = {{"float32", at::kFloat}, {"float64", at::kDouble}, {"float16", at::kHalf},
                                {"bfloat16", at::kBFloat16}};

struct ConvShape {
  int64_t n, c, h, w, k;
};
constexpr ConvShape kShapes[] = {{8, 64, 56, 56, 3}, {4, 32, 112, 112, 5}, {1, 256, 28, 28, 3}, {16, 64, 128, 128, 3}};

std::string shape_name(const ConvShape& s) {
  return std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w) +
         "_k" + std::to_string(s.k);
}

const c10::OperatorHandle& identity_op() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("my_ops::identity_conv_op", "");
  return op;
}

void set_bytes(benchmark::State& state, int64_t bytes_per_iter) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iter);
}

void identity(benchmark::State& state, at::ScalarType dtype, int64_t mib) {
  const int64_t elems = mib * (1 << 20) / static_cast<int64_t>(c10::elementSize(dtype));
  const at::Tensor x = at::randn({elems / 4096, 1, 64, 64}, at::TensorOptions().device(g_device)).to(dtype);
  const auto op = identity_op().typed<at::Tensor(const at::Tensor&)>();
  for (auto _ : state) {
    benchmark::DoNotOptimize(op.call(x));
    sync();
  }
  set_bytes(state, 2 * x.nbytes());  // read + write
}

void clone(benchmark::State& state, at::ScalarType dtype, int64_t mib) {
  const int64_t elems = mib * (1 << 20) / static_cast<int64_t>(c10::elementSize(dtype));
  const at::Tensor x = at::randn({elems / 4096, 1, 64, 64}, at::TensorOptions().device(g_device)).to(dtype);
  for (auto _ : state) {
    benchmark::DoNotOptimize(x.clone());
    sync();
  }
  set_bytes(state, 2 * x.nbytes());
}

at::Tensor input_for(const ConvShape& s, at::ScalarType dtype) {
  return at::randn({s.n, s.c, s.h, s.w}, at::TensorOptions().device(g_device)).to(dtype);
}

void class_forward(benchmark::State& state, ConvShape s, at::ScalarType dtype) {
  const auto cls = torch::getCustomClass("__torch__.torch.classes.my_ops.IdentityConvClass");
  auto obj = c10::ivalue::Object::create(c10::StrongTypePtr(nullptr, cls), /*numSlots=*/1);
  cls->getMethod("__init__")({c10::IValue(obj), s.c, s.k});
  auto& forward = cls->getMethod("forward");
  // A real weight rather than the identity it starts with, so nothing is special-cased.
  cls->getMethod("set_weight")({c10::IValue(obj), at::randn({s.c, 1, s.k, s.k})});
  const at::Tensor x = input_for(s, dtype);
  forward({c10::IValue(obj), x});  // the class caches the weight per device and dtype
  for (auto _ : state) {
    benchmark::DoNotOptimize(forward({c10::IValue(obj), x}));
    sync();
  }
  set_bytes(state, 2 * x.nbytes());
}

void aten_conv(benchmark::State& state, ConvShape s, at::ScalarType dtype, bool channels_last) {
  at::Tensor x = input_for(s, dtype);
  at::Tensor w = at::randn({s.c, 1, s.k, s.k}, at::TensorOptions().device(g_device)).to(dtype);
  if (channels_last) {
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
    w = w.contiguous(at::MemoryFormat::ChannelsLast);
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(at::conv2d(x, w, {}, 1, s.k / 2, 1, s.c));
    sync();
  }
  set_bytes(state, 2 * x.nbytes());
}

void clone_input(benchmark::State& state, ConvShape s, at::ScalarType dtype) {
  const at::Tensor x = input_for(s, dtype);
  for (auto _ : state) {
    benchmark::DoNotOptimize(x.clone());
    sync();
  }
  set_bytes(state, 2 * x.nbytes());
}

void register_all(const std::vector<int64_t>& sizes_mib) {
  for (const auto& d : kDTypes) {
    for (int64_t mib : sizes_mib) {
      const std::string suffix = std::string(d.name) + "/" + std::to_string(mib) + "MiB";
      benchmark::RegisterBenchmark(("IdentityOp/" + suffix).c_str(), identity, d.type, mib)->UseRealTime();
      benchmark::RegisterBenchmark(("Clone/" + suffix).c_str(), clone, d.type, mib)->UseRealTime();
    }
  }
  for (const auto& s : kShapes) {
    for (const auto& d : kDTypes) {
      if (d.type != at::kFloat && d.type != at::kBFloat16) continue;
      const std::string suffix = shape_name(s) + "/" + d.name;
      benchmark::RegisterBenchmark(("ClassForward/" + suffix).c_str(), class_forward, s, d.type)->UseRealTime();
      benchmark::RegisterBenchmark(("AtenConv/nchw/" + suffix).c_str(), aten_conv, s, d.type, false)->UseRealTime();
      benchmark::RegisterBenchmark(("AtenConv/channels_last/" + suffix).c_str(), aten_conv, s, d.type, true)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("CloneInput/" + suffix).c_str(), clone_input, s, d.type)->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Our flags first (Google Benchmark rejects what it does not know): --ops PATH, --device cpu|cuda,
  // --sizes-mib 1,4,16,64,256.
  std::string ops = std::getenv("IDENTITY_CONV_OPS_LIBRARY") ? std::getenv("IDENTITY_CONV_OPS_LIBRARY") : "";
  std::vector<int64_t> sizes = {1, 4, 16, 64, 256};
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ops" && i + 1 < argc) {
      ops = argv[++i];
    } else if (a == "--device" && i + 1 < argc) {
      g_device = at::Device(argv[++i]);
    } else if (a == "--sizes-mib" && i + 1 < argc) {
      sizes.clear();
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) sizes.push_back(std::atoll(t));
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (ops.empty()) {
    std::fprintf(stderr, "error: pass --ops PATH to libidentity_conv_ops.so (or set IDENTITY_CONV_OPS_LIBRARY)\n");
    return 2;
  }
  if (!dlopen(ops.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    std::fprintf(stderr, "error: cannot load %s: %s\n", ops.c_str(), dlerror());
    return 2;
  }
  if (g_device.is_cuda() && !at::hasCUDA()) {
    std::fprintf(stderr, "error: --device cuda, but this torch sees no CUDA device\n");
    return 2;
  }
  // Every kernel and baseline allocates its output per call. With glibc's defaults a large one is a fresh mmap each
  // time, and the call pays a page fault per 4 KiB written (about the time of the kernel itself at 64 MiB), or not,
  // depending on what the allocator happened to keep. Served from the heap and kept when freed (a long-running
  // process in steady state), outputs cost the kernels' own time, whichever side is measured.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  benchmark::AddCustomContext("device", g_device.str());
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  register_all(sizes);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
