// Shared declarations of the my_ops library. No Python, no <torch/extension.h>.
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>

namespace my_ops {

// Kernel sizes the class accepts: odd, 1..kMaxKernelSize.
constexpr int64_t kMaxKernelSize = 7;

// Checks shared by every kernel: a 4-D NCHW tensor of a supported floating dtype.
// `what` names the caller in the error message.
void check_input(const at::Tensor& x, const char* what);

// Checks a depthwise weight against an input: shape (C, 1, k, k), k odd in 1..7, C == x.size(1).
void check_weight(const at::Tensor& weight, int64_t channels, const char* what);

// Launch shape of the CUDA kernels (grid-stride loops cover the rest; 65535 * 256 elements per pass is plenty).
constexpr int kCudaThreads = 256;
inline int cuda_blocks_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kCudaThreads - 1) / kCudaThreads, 65535));
}

// CPU kernels (identity_conv_cpu.cpp, depthwise_conv2d_cpu.cpp).
at::Tensor identity_conv_cpu(const at::Tensor& x);
at::Tensor depthwise_conv2d_cpu(const at::Tensor& x, const at::Tensor& weight);

// CUDA launchers (<op>_cuda.cu), on arguments cuda_ops.cpp has checked: they throw only what CUDA reports.
at::Tensor identity_conv_cuda(const at::Tensor& x);
at::Tensor depthwise_conv2d_cuda(const at::Tensor& x, const at::Tensor& weight);

}  // namespace my_ops
