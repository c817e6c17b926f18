// The CUDA kernels' argument checks and registrations. Compiled by the C++ compiler, like torch itself: errors are
// thrown from here and the dispatcher's templates are instantiated here, never in nvcc's host code (which may use
// another host compiler than the one the library links with).
#include "identity_conv.h"

#include <torch/library.h>

namespace my_ops {

namespace {

at::Tensor identity_conv_cuda_checked(const at::Tensor& x) {
  check_input(x, "identity_conv_op");
  return identity_conv_cuda(x);
}

at::Tensor depthwise_conv2d_cuda_checked(const at::Tensor& x, const at::Tensor& weight) {
  check_input(x, "depthwise_conv2d");
  check_weight(weight, x.size(1), "depthwise_conv2d");
  TORCH_CHECK(weight.device() == x.device(), "depthwise_conv2d: expected the weight on the input's device ",
              x.device(), ", got ", weight.device());
  return depthwise_conv2d_cuda(x, weight);
}

}  // namespace

}  // namespace my_ops

TORCH_LIBRARY_IMPL(my_ops, CUDA, m) {
  m.impl("identity_conv_op", &my_ops::identity_conv_cuda_checked);
  m.impl("depthwise_conv2d", &my_ops::depthwise_conv2d_cuda_checked);
}
