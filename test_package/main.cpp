// A consumer: loads the package with its ops library, verifies it, runs one input.   tp_main PACKAGE LIBRARY
#include <pt2rt/pt2rt.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: tp_main PACKAGE OPS_LIBRARY\n");
    return 2;
  }
  try {
    pt2rt::Options options;
    options.ops_libraries = {argv[2]};
    const pt2rt::Runtime rt = pt2rt::Runtime::load(argv[1], options);
    if (!rt.verify().passed()) {
      std::fprintf(stderr, "tp_main: golden cases failed\n");
      return 1;
    }
    const float x[8] = {-2, -1, -0.5f, 0, 0.25f, 1, 2, 3};
    const auto out = rt.run({pt2rt::TensorView{x, {2, 4}, pt2rt::DType::Float32}});
    const auto* y = static_cast<const float*>(out.at(0).data());
    for (int i = 0; i < 8; ++i) {
      if (std::fabs(y[i] - std::max(0.0f, 3 * x[i] + 1)) > 1e-6f) {
        std::fprintf(stderr, "tp_main: output %d is %g, expected %g\n", i, y[i], std::max(0.0f, 3 * x[i] + 1));
        return 1;
      }
    }
    std::printf("tp_main: pt2rt %s ran %s: verified, relu(3x + 1) as expected\n", pt2rt::version(), argv[1]);
    return 0;
  } catch (const pt2rt::Error& e) {
    std::fprintf(stderr, "tp_main: %s\n", e.what());
    return pt2rt::exit_code(e.code());
  }
}
