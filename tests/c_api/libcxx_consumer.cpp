// A C++ program built with clang and libc++ (-stdlib=libc++) against the C header only, as an Unreal Engine module
// on Linux would be: libpt2rt.so itself uses libstdc++, and nothing of either standard library crosses between
// them. Four threads run the example model on one runtime and compare every output with the main thread's; errors
// stay on the thread that made them. Prints the checksum of 60 frames, as tests/c_api/test_c_api.c does.
//   libcxx_consumer PACKAGES_DIR OPS_LIBRARY
#include <pt2rt/pt2rt_c.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if !defined(_LIBCPP_VERSION)
#error "build this with -stdlib=libc++"
#endif

namespace {

struct RuntimeFree {
  void operator()(pt2rt_runtime* r) const { pt2rt_runtime_free(r); }
};
struct TensorFree {
  void operator()(pt2rt_tensor* t) const { pt2rt_tensor_free(t); }
};
using RuntimePtr = std::unique_ptr<pt2rt_runtime, RuntimeFree>;
using TensorPtr = std::unique_ptr<pt2rt_tensor, TensorFree>;

constexpr int64_t kC = 3, kH = 32, kW = 32, kFrame = kC * kH * kW;

std::vector<float> frame(int f) {
  std::vector<float> x(kFrame);
  for (int64_t i = 0; i < kFrame; ++i) x[i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i + f)));
  return x;
}

// One frame through the model; an empty vector (and the message on stderr) on failure.
std::vector<float> run(const pt2rt_runtime* rt, const std::vector<float>& x) {
  const int64_t shape[4] = {1, kC, kH, kW};
  const pt2rt_tensor_view in{x.data(), shape, 4, PT2RT_FLOAT32};
  pt2rt_tensor* raw = nullptr;
  size_t n = 0;
  if (pt2rt_run(rt, &in, 1, &raw, 1, &n) != PT2RT_OK) {
    std::fprintf(stderr, "pt2rt_run: %s\n", pt2rt_last_error());
    return {};
  }
  TensorPtr out(raw);
  const auto* data = static_cast<const float*>(pt2rt_tensor_data(out.get()));
  return std::vector<float>(data, data + pt2rt_tensor_nbytes(out.get()) / sizeof(float));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PACKAGES_DIR OPS_LIBRARY\n", argv[0]);
    return 2;
  }
  if (pt2rt_check_c_api_version(PT2RT_C_API_VERSION) != PT2RT_OK) {
    std::fprintf(stderr, "%s\n", pt2rt_last_error());
    return 1;
  }
  const std::string package = std::string(argv[1]) + "/net_dynamic.pt2";
  const char* ops = argv[2];
  pt2rt_runtime* raw = nullptr;
  if (pt2rt_load(package.c_str(), &ops, 1, 4, &raw) != PT2RT_OK) {
    std::fprintf(stderr, "pt2rt_load: %s\n", pt2rt_last_error());
    return 1;
  }
  RuntimePtr rt(raw);

  constexpr int kFrames = 8, kThreads = 4, kIters = 40;
  std::vector<std::vector<float>> inputs, expected;
  for (int f = 0; f < kFrames; ++f) {
    inputs.push_back(frame(f));
    expected.push_back(run(rt.get(), inputs.back()));
    if (expected.back().empty()) return 1;
  }

  std::atomic<int> mismatches{0}, failures{0}, leaked_errors{0};
  std::atomic<bool> bad_call_made{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        const int f = (t + i) % kFrames;
        const std::vector<float> y = run(rt.get(), inputs[f]);
        if (y.size() != expected[f].size()) {
          ++failures;
          continue;
        }
        for (size_t k = 0; k < y.size(); ++k)
          if (std::fabs(y[k] - expected[f][k]) > 1e-5f * (1.0f + std::fabs(expected[f][k]))) {
            ++mismatches;
            break;
          }
      }
      // Thread 0 makes a bad call; the others must not see its message.
      if (t == 0) {
        const int64_t bad[4] = {1, kC, kH + 1, kW};
        const pt2rt_tensor_view in{inputs[0].data(), bad, 4, PT2RT_FLOAT32};
        pt2rt_tensor* out = nullptr;
        size_t n = 0;
        if (pt2rt_run(rt.get(), &in, 1, &out, 1, &n) != PT2RT_ERROR_INPUT || std::strlen(pt2rt_last_error()) == 0)
          ++failures;
        bad_call_made = true;
      } else {
        while (!bad_call_made) std::this_thread::yield();  // look only once thread 0's error exists
        if (std::strlen(pt2rt_last_error()) != 0) ++leaked_errors;
      }
    });
  }
  for (auto& th : threads) th.join();

  double checksum = 0;
  for (int f = 0; f < 60; ++f)
    for (float v : run(rt.get(), frame(f))) checksum += v;
  std::printf("%d threads x %d runs: %d mismatches, %d failures, %d leaked errors\n", kThreads, kIters,
              mismatches.load(), failures.load(), leaked_errors.load());
  std::printf("checksum %.9g\n", checksum);
  return mismatches == 0 && failures == 0 && leaked_errors == 0 ? 0 : 1;
}
