// Runs pt2rt::Runtime::run (mode runtime) or the raw AOTIModelPackageLoader::run (mode raw) N times on the same
// package and input, for counting instructions under valgrind, where wall time on a shared machine cannot
// separate the two:
//   valgrind --tool=callgrind pt2rt_count_runtime {none|runtime|raw} N PACKAGE OPS_LIBRARY
// (instructions of a mode - those of "none") / N = instructions per call.
#include <pt2rt/pt2rt.h>

#include <ATen/ATen.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s {none|runtime|raw} N PACKAGE OPS_LIBRARY\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const int n = std::atoi(argv[2]);
  if ((mode != "none" && mode != "runtime" && mode != "raw") || n < 0) {
    std::fprintf(stderr, "error: expected a mode none, runtime or raw and N >= 0, got '%s' '%s'\n", argv[1], argv[2]);
    return 2;
  }
  pt2rt::set_num_threads(1);  // no OpenMP wake-ups in the count
  pt2rt::Options options;
  options.ops_libraries = {argv[4]};
  const auto runtime = pt2rt::Runtime::load(argv[3], options);
  torch::inductor::AOTIModelPackageLoader raw(argv[3], "model", false, 1);
  const auto example = runtime.example_inputs();
  const at::Tensor x = at::from_blob(const_cast<void*>(example[0].data()), example[0].shape(), at::kFloat).clone();
  pt2rt::TensorView view;
  view.data = x.const_data_ptr();
  view.shape = x.sizes().vec();
  c10::InferenceMode inference;
  for (int i = 0; i < 3; ++i) {  // warm-up, the same in every mode
    runtime.run({view});
    raw.run({x});
  }
  for (int i = 0; i < n; ++i) {
    if (mode == "runtime") runtime.run({view});
    if (mode == "raw") raw.run({x});
  }
  std::printf("%s x %d\n", mode.c_str(), n);
  return 0;
}
