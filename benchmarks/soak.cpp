// Soak: many inferences on one Runtime; prints the resident-memory growth after warm-up.
//   pt2rt_soak PACKAGE [--ops LIB] [--iters N] [--warmup N] [--threads N] [--max-growth-mb X]
// With --max-growth-mb it exits 1 when the growth exceeds X (what the soak test asserts).
#include <pt2rt/pt2rt.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

double rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pt2rt soak: many inferences, resident-memory growth after warm-up"};
  std::string package;
  std::vector<std::string> ops;
  int iters = 100000, warmup = 1000, threads = 2;
  double max_growth = -1;
  app.add_option("package", package)->required();
  app.add_option("--ops", ops);
  app.add_option("--iters", iters)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads)->check(CLI::Range(1, 64));
  app.add_option("--max-growth-mb", max_growth, "exit 1 when RSS grows more than this after warm-up");
  CLI11_PARSE(app, argc, argv);
  try {
    pt2rt::Options options;
    options.ops_libraries = ops;
    options.num_runners = threads;
    const pt2rt::Runtime rt = pt2rt::Runtime::load(package, options);
    // Varied batch sizes when the batch is dynamic: allocations of many sizes.
    const auto example = rt.example_inputs();
    std::vector<std::vector<pt2rt::Tensor>> inputs{example};
    const auto& spec = rt.spec();
    if (!spec.inputs.empty() && !spec.inputs[0].dynamic_dims.empty() && spec.inputs[0].dynamic_dims[0].dim == 0) {
      const auto& d = spec.inputs[0].dynamic_dims[0];
      for (int64_t b : {d.min, d.max.value_or(d.min), (d.min + d.max.value_or(d.min)) / 2}) {
        std::vector<pt2rt::Tensor> case_inputs;
        for (const auto& t : example) {
          pt2rt::TensorView v = t.view();
          v.shape[0] = 1;  // one sample of the example, repeated b times
          std::vector<char> bytes;
          const size_t sample = t.nbytes() / static_cast<size_t>(t.shape()[0]);
          for (int64_t i = 0; i < b; ++i)
            bytes.insert(bytes.end(), static_cast<const char*>(t.data()), static_cast<const char*>(t.data()) + sample);
          v.data = bytes.data();
          v.shape[0] = b;
          case_inputs.push_back(pt2rt::Tensor::copy_of(v));
        }
        inputs.push_back(case_inputs);
      }
    }
    auto work = [&](int count) {
      std::atomic<int> next{0};
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&] {
          for (int i; (i = next.fetch_add(1)) < count;) {
            const auto& in = inputs[static_cast<size_t>(i) % inputs.size()];
            std::vector<pt2rt::TensorView> views;
            for (const auto& x : in) views.push_back(x.view());
            rt.run(views);
          }
        });
      }
      for (auto& th : pool) th.join();
    };
    work(warmup);
    const double before = rss_mb();
    work(iters);
    const double after = rss_mb();
    std::printf("soak: %d runs on %d threads after %d warm-up runs: RSS %.1f MB -> %.1f MB, growth %.2f MB\n", iters,
                threads, warmup, before, after, after - before);
    if (max_growth >= 0 && after - before > max_growth) {
      std::printf("soak: FAILED, growth above %.2f MB\n", max_growth);
      return 1;
    }
    return 0;
  } catch (const pt2rt::Error& e) {
    std::fprintf(stderr, "pt2rt_soak: error (%s): %s\n", pt2rt::error_code_name(e.code()), e.what());
    return pt2rt::exit_code(e.code());
  }
}
