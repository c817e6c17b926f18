// The my_ops namespace: every op's schema (the class registers itself in identity_conv_class.cpp), and the input
// checks the kernels share. Kernels: <op>_cpu.cpp and <op>_cuda.cu, one file per op per backend.
#include "identity_conv.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace my_ops {

namespace {

bool supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

}  // namespace

void check_input(const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.defined(), what, ": expected a tensor, got an undefined tensor");
  TORCH_CHECK(x.dim() == 4, what, ": expected a 4-D NCHW tensor, got a ", x.dim(),
              "-D tensor of shape ", x.sizes());
  TORCH_CHECK(supported_dtype(x.scalar_type()), what,
              ": expected dtype float32, float64, float16 or bfloat16, got ", x.scalar_type());
}

void check_weight(const at::Tensor& weight, int64_t channels, const char* what) {
  TORCH_CHECK(weight.defined(), what, ": expected a weight tensor, got an undefined tensor");
  TORCH_CHECK(supported_dtype(weight.scalar_type()), what,
              ": expected a weight of dtype float32, float64, float16 or bfloat16, got ",
              weight.scalar_type());
  const int64_t k = weight.dim() == 4 ? weight.size(2) : -1;
  TORCH_CHECK(weight.dim() == 4 && weight.size(0) == channels && weight.size(1) == 1 &&
                  weight.size(3) == k && k >= 1 && k <= kMaxKernelSize && k % 2 == 1,
              what, ": expected a depthwise weight of shape (", channels,
              ", 1, k, k) with k odd in 1..", kMaxKernelSize, ", got shape ", weight.sizes());
}

}  // namespace my_ops

TORCH_LIBRARY(my_ops, m) {
  m.def("identity_conv_op(Tensor x) -> Tensor");
  m.def("depthwise_conv2d(Tensor x, Tensor weight) -> Tensor");
}
