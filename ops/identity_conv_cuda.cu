// my_ops::identity_conv_op on CUDA, on the current stream of the input's device.
#include "identity_conv.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>

namespace my_ops {

namespace {

struct Strides4 {
  int64_t s[4];
};

template <typename scalar_t>
__global__ void copy_strided_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ dst, int64_t C,
                                    int64_t H, int64_t W, Strides4 is, Strides4 os, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % C, b = i / (W * H * C);
    dst[b * os.s[0] + c * os.s[1] + h * os.s[2] + w * os.s[3]] =
        src[b * is.s[0] + c * is.s[1] + h * is.s[2] + w * is.s[3]];
  }
}

Strides4 strides_of(const at::Tensor& t) {
  return Strides4{{t.stride(0), t.stride(1), t.stride(2), t.stride(3)}};
}

}  // namespace

at::Tensor identity_conv_cuda(const at::Tensor& x) {
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty_like(x);
  const int64_t n = x.numel();
  if (n == 0) return out;
  const auto stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  if (x.is_non_overlapping_and_dense() && out.strides() == x.strides()) {
    // The copy engine's path, as clone() takes: an element-per-thread kernel reached 0.4-0.5x of it on an H200.
    C10_CUDA_CHECK(cudaMemcpyAsync(out.mutable_data_ptr(), x.const_data_ptr(), x.nbytes(), cudaMemcpyDeviceToDevice,
                                   stream));
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "identity_conv_cuda", [&] {
    copy_strided_kernel<scalar_t><<<cuda_blocks_for(n), kCudaThreads, 0, stream>>>(
        x.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), x.size(1), x.size(2), x.size(3),
        strides_of(x), strides_of(out), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace my_ops
