// my_ops::identity_conv_op on the CPU: a copy with the input's strides when it is dense, else contiguous. The
// kernel is identity_conv_kernel.h's, which the lite build (identity_conv_lite.cpp) runs too.
#include "identity_conv.h"
#include "identity_conv_kernel.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

namespace my_ops {

at::Tensor identity_conv_cpu(const at::Tensor& x) {
  check_input(x, "identity_conv_op");
  // Same strides as the input when it is dense, else its suggested memory format; the fake does the same.
  at::Tensor out = at::empty_like(x);
  const auto parallel_for = [](int64_t begin, int64_t end, int64_t grain, const auto& f) {
    at::parallel_for(begin, end, grain, f);
  };
  kernels::identity_conv(x.const_data_ptr(), x.sizes().data(), x.strides().data(), out.mutable_data_ptr(),
                         out.strides().data(), static_cast<int64_t>(x.element_size()), parallel_for);
  return out;
}

}  // namespace my_ops

TORCH_LIBRARY_IMPL(my_ops, CPU, m) { m.impl("identity_conv_op", &my_ops::identity_conv_cpu); }
