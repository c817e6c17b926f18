// pt2rt::Runtime::run vs torch's AOTIModelPackageLoader::run on the same package, input and thread
// (Google Benchmark). The difference is what pt2rt adds: input validation, wrapping, error translation. And
// Runtime::run_into, writing into buffers allocated once, against run; and run_into reusing run memory
// (Options::reuse_run_memory: no allocation per run once warm).
//   pt2rt_bench_runtime --package model.pt2 --ops libidentity_conv_ops.so [--batch N] [benchmark flags]
#include <pt2rt/pt2rt.h>

#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Setup {
  std::unique_ptr<pt2rt::Runtime> runtime;
  std::unique_ptr<pt2rt::Runtime> reusing;  // reuse_run_memory on
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> raw;
  std::vector<at::Tensor> inputs;  // shared by both
  std::vector<at::Tensor> outputs;  // run_into's buffers, shaped by a first run
};

Setup g;

void runtime_run(benchmark::State& state) {
  std::vector<pt2rt::TensorView> views;
  for (const auto& t : g.inputs) {
    pt2rt::TensorView v;
    v.data = t.const_data_ptr();
    v.shape = t.sizes().vec();
    v.dtype = pt2rt::DType::Float32;
    views.push_back(v);
  }
  for (auto _ : state) benchmark::DoNotOptimize(g.runtime->run(views));
}

void run_into(benchmark::State& state, const pt2rt::Runtime& runtime) {
  std::vector<pt2rt::TensorView> views;
  for (const auto& t : g.inputs) views.push_back(pt2rt::TensorView{t.const_data_ptr(), t.sizes().vec(), pt2rt::DType::Float32});
  std::vector<pt2rt::OutputView> outs;
  for (auto& t : g.outputs) {
    outs.push_back(pt2rt::OutputView{t.data_ptr(), t.sizes().vec(), pt2rt::DType::Float32});
  }
  for (auto _ : state) {
    runtime.run_into(views, outs);
    benchmark::ClobberMemory();
  }
}

void runtime_run_into(benchmark::State& state) { run_into(state, *g.runtime); }
void runtime_run_into_reusing(benchmark::State& state) { run_into(state, *g.reusing); }

void raw_run(benchmark::State& state) {
  c10::InferenceMode inference;  // the raw loader used well (pt2rt::Runtime::run does the same)
  for (auto _ : state) benchmark::DoNotOptimize(g.raw->run(g.inputs));
}

}  // namespace

int main(int argc, char** argv) {
  std::string package, ops;
  int64_t batch = 0;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--package" && i + 1 < argc) {
      package = argv[++i];
    } else if (a == "--ops" && i + 1 < argc) {
      ops = argv[++i];
    } else if (a == "--batch" && i + 1 < argc) {
      batch = std::atoll(argv[++i]);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (package.empty() || ops.empty()) {
    std::fprintf(stderr, "usage: %s --package PKG.pt2 --ops LIB.so [--batch N] [benchmark flags]\n", argv[0]);
    return 2;
  }
  try {
    pt2rt::Options options;
    options.ops_libraries = {ops};
    g.runtime = std::make_unique<pt2rt::Runtime>(pt2rt::Runtime::load(package, options));
    options.reuse_run_memory = true;
    g.reusing = std::make_unique<pt2rt::Runtime>(pt2rt::Runtime::load(package, options));
    for (const auto& t : g.runtime->example_inputs()) {
      if (t.dtype() != pt2rt::DType::Float32) {
        std::fprintf(stderr, "error: this benchmark feeds float32 inputs; the package wants %s\n",
                     pt2rt::dtype_name(t.dtype()));
        return 2;
      }
      at::Tensor x = at::from_blob(const_cast<void*>(t.data()), t.shape(), at::kFloat).clone();
      if (batch > 0) {
        auto shape = x.sizes().vec();
        shape[0] = batch;
        x = at::randn(shape);
      }
      g.inputs.push_back(x);
    }
    // The ops library is loaded (by the runtime); the raw loader needs nothing else. It loads the CPU variant the
    // runtime chose: "model" is the package's first variant, which may be another ISA's code.
    {
      std::vector<pt2rt::TensorView> views;
      for (const auto& t : g.inputs) views.push_back(pt2rt::TensorView{t.const_data_ptr(), t.sizes().vec(), pt2rt::DType::Float32});
      for (const auto& o : g.runtime->run(views)) {
        if (o.dtype() != pt2rt::DType::Float32) {
          std::fprintf(stderr, "error: this benchmark takes float32 outputs; the package returns %s\n",
                       pt2rt::dtype_name(o.dtype()));
          return 2;
        }
        g.outputs.push_back(at::empty(o.shape(), at::kFloat));
      }
    }
    g.raw = std::make_unique<torch::inductor::AOTIModelPackageLoader>(package, g.runtime->variant().model, false, 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  const std::string shape = std::to_string(g.inputs.front().size(0));
  benchmark::AddCustomContext("package", package);
  benchmark::AddCustomContext("batch", shape);
  // Interleaved, so slow drift on a shared machine hits both alike.
  for (int round = 0; round < 7; ++round) {
    benchmark::RegisterBenchmark(("RawLoaderRun/batch" + shape).c_str(), raw_run)->UseRealTime();
    benchmark::RegisterBenchmark(("RuntimeRun/batch" + shape).c_str(), runtime_run)->UseRealTime();
    benchmark::RegisterBenchmark(("RuntimeRunInto/batch" + shape).c_str(), runtime_run_into)->UseRealTime();
    benchmark::RegisterBenchmark(("RuntimeRunIntoReusing/batch" + shape).c_str(), runtime_run_into_reusing)->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // AOTI's loader removes its extraction directory when destroyed; the runtime does too.
  g = Setup{};
  return 0;
}
