// The shape of a game or service loop: load the model once, then serve frames/requests from a few threads.
//   embed_example MODEL.pt2 [FRAMES] [THREADS]
#include <pt2rt/pt2rt.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.pt2 [FRAMES] [THREADS]\n", argv[0]);
    return 2;
  }
  const int frames = argc > 2 ? std::atoi(argv[2]) : 100;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 3;
  try {
    pt2rt::Options options;
    options.num_runners = threads;  // one model instance per worker: no waiting on each other
    const pt2rt::Runtime runtime = pt2rt::Runtime::load(argv[1], options);
    const pt2rt::Spec& spec = runtime.spec();
    const pt2rt::TensorSpec& in = spec.inputs.at(0);
    if (in.dtype != pt2rt::DType::Float32) {
      std::fprintf(stderr, "this example feeds float32 frames; the model wants %s\n", pt2rt::dtype_name(in.dtype));
      return 2;
    }
    std::printf("loaded %s: %zu input(s), ops from", spec.model.c_str(), spec.inputs.size());
    for (const auto& lib : runtime.ops_libraries()) std::printf(" %s", lib.c_str());
    std::printf("\n");

    // A frame: the input shape with each dynamic dim at its minimum (batch 1 for a dynamic batch).
    std::vector<int64_t> shape = in.shape;
    for (const auto& d : in.dynamic_dims) shape[d.dim] = std::max<int64_t>(d.min, 1);
    size_t numel = 1;
    for (auto s : shape) numel *= static_cast<size_t>(s);

    std::atomic<int> next{0}, failures{0};
    std::atomic<double> checksum{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::vector<float> frame(numel);
        for (int f; (f = next.fetch_add(1)) < frames;) {
          for (size_t i = 0; i < numel; ++i) frame[i] = std::sin(0.001f * static_cast<float>(i + f));
          try {
            const auto out = runtime.run({pt2rt::TensorView{frame.data(), shape, pt2rt::DType::Float32}});
            const float* y = static_cast<const float*>(out.at(0).data());
            double sum = 0;
            for (int64_t i = 0; i < out[0].numel(); ++i) sum += y[i];
            double cur = checksum.load();
            while (!checksum.compare_exchange_weak(cur, cur + sum)) {
            }
          } catch (const pt2rt::Error& e) {
            std::fprintf(stderr, "worker %d, frame %d: %s\n", t, f, e.what());
            ++failures;
          }
        }
      });
    }
    for (auto& w : workers) w.join();
    std::printf("%d frames on %d threads, %d failures, checksum %.6g\n", frames, threads, failures.load(),
                checksum.load());
    return failures.load() == 0 ? 0 : 1;
  } catch (const pt2rt::Error& e) {
    std::fprintf(stderr, "embed_example: %s error: %s\n", pt2rt::error_code_name(e.code()), e.what());
    return pt2rt::exit_code(e.code());
  }
}
