// Shared declarations of the my_ops library. No Python, no <torch/extension.h>.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace my_ops {

// Kernel sizes the class accepts: odd, 1..kMaxKernelSize.
constexpr int64_t kMaxKernelSize = 7;

// Checks shared by every kernel: a 4-D NCHW tensor of a supported floating dtype.
// `what` names the caller in the error message.
void check_input(const at::Tensor& x, const char* what);

// Checks a depthwise weight against an input: shape (C, 1, k, k), k odd in 1..7, C == x.size(1).
void check_weight(const at::Tensor& weight, int64_t channels, const char* what);

// CPU kernels (identity_conv_cpu.cpp, depthwise_conv2d_cpu.cpp).
at::Tensor identity_conv_cpu(const at::Tensor& x);
at::Tensor depthwise_conv2d_cpu(const at::Tensor& x, const at::Tensor& weight);

}  // namespace my_ops
