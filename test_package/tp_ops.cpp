// tp::affine(Tensor x) -> Tensor: 3 * x + 1, the test package's own op.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace {
at::Tensor affine(const at::Tensor& x) { return x * 3 + 1; }
}  // namespace

TORCH_LIBRARY(tp, m) { m.def("affine(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(tp, CPU, m) { m.impl("affine", &affine); }
