// my_ops::depthwise_conv2d on CUDA, on the current stream of the input's device.
#include "identity_conv.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <climits>
#include <cstdint>

namespace my_ops {

namespace {

// Outputs per block: a kTileH x kTileW tile of one plane, kTileW x kBlockRows threads, each kTileH / kBlockRows
// outputs of a column. The block stages the tile's input with its halo in shared memory once (as the accumulation
// type: half and bfloat16 are converted once, not K*K times), so each input element is read from global memory
// about once instead of K*K times. Padding is zeros, as ATen's convolution pads.
constexpr int kTileW = 32, kTileH = 32, kBlockRows = 8;

template <typename scalar_t, int K>
__global__ void __launch_bounds__(kTileW * kBlockRows)
    depthwise_tiled_kernel(const scalar_t* __restrict__ in, const at::opmath_type<scalar_t>* __restrict__ weight,
                           scalar_t* __restrict__ out, int64_t C, int H, int W, int64_t planes, int tiles_w) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int P = K / 2, SH = kTileH + K - 1, SW = kTileW + K - 1;
  __shared__ acc_t tile[SH][SW];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kTileW + tx;
  const int h0 = static_cast<int>(blockIdx.x / tiles_w) * kTileH, w0 = static_cast<int>(blockIdx.x % tiles_w) * kTileW;
  const int64_t plane_size = int64_t(H) * W;
  for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const scalar_t* src = in + plane * plane_size;
    const acc_t* wp = weight + (plane % C) * K * K;
    acc_t wk[K * K];
#pragma unroll
    for (int i = 0; i < K * K; ++i) wk[i] = wp[i];
    __syncthreads();  // the previous plane's reads of the tile are done
    for (int i = tid; i < SH * SW; i += kTileW * kBlockRows) {
      const int r = i / SW, c = i % SW, ih = h0 + r - P, iw = w0 + c - P;
      tile[r][c] = ih >= 0 && ih < H && iw >= 0 && iw < W ? static_cast<acc_t>(src[int64_t(ih) * W + iw]) : acc_t(0);
    }
    __syncthreads();
    scalar_t* dst = out + plane * plane_size;
    const int ow = w0 + tx;
#pragma unroll
    for (int j = 0; j < kTileH / kBlockRows; ++j) {
      const int r = ty + j * kBlockRows, oh = h0 + r;
      if (oh >= H || ow >= W) continue;
      acc_t acc = 0;
#pragma unroll
      for (int a = 0; a < K; ++a) {
#pragma unroll
        for (int b = 0; b < K; ++b) acc += wk[a * K + b] * tile[r + a][tx + b];
      }
      dst[int64_t(oh) * W + ow] = static_cast<scalar_t>(acc);
    }
  }
}

template <typename scalar_t, int K>
void launch_tiled(const at::Tensor& x, const at::Tensor& w, at::Tensor& out, cudaStream_t stream) {
  const int H = static_cast<int>(x.size(2)), W = static_cast<int>(x.size(3));
  const int tiles_w = (W + kTileW - 1) / kTileW, tiles_h = (H + kTileH - 1) / kTileH;
  const int64_t planes = x.size(0) * x.size(1);
  const dim3 grid(static_cast<unsigned>(tiles_w * tiles_h), static_cast<unsigned>(std::min<int64_t>(planes, 65535)));
  depthwise_tiled_kernel<scalar_t, K><<<grid, dim3(kTileW, kBlockRows), 0, stream>>>(
      x.const_data_ptr<scalar_t>(), w.const_data_ptr<at::opmath_type<scalar_t>>(), out.mutable_data_ptr<scalar_t>(),
      x.size(1), H, W, planes, tiles_w);
}

}  // namespace

at::Tensor depthwise_conv2d_cuda(const at::Tensor& x, const at::Tensor& weight) {
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int64_t tiles = ((x.size(2) + kTileH - 1) / kTileH) * ((x.size(3) + kTileW - 1) / kTileW);
  TORCH_CHECK(x.size(2) <= INT32_MAX - kTileH && x.size(3) <= INT32_MAX - kTileW && tiles <= INT32_MAX,
              "depthwise_conv2d: a plane of ", x.size(2), " x ", x.size(3), " is past what the CUDA kernel indexes "
              "(height and width below 2^31, at most 2^31 tiles of ", kTileH, " x ", kTileW, ")");
  const auto stream = c10::cuda::getCurrentCUDAStream(x.device().index());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "depthwise_conv2d_cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const at::Tensor w = weight.to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
    switch (weight.size(2)) {  // check_weight: odd, 1..kMaxKernelSize
      case 1: launch_tiled<scalar_t, 1>(xc, w, out, stream); break;
      case 3: launch_tiled<scalar_t, 3>(xc, w, out, stream); break;
      case 5: launch_tiled<scalar_t, 5>(xc, w, out, stream); break;
      default: launch_tiled<scalar_t, 7>(xc, w, out, stream); break;
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace my_ops
