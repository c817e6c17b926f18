// The inner loop of the CPU depthwise convolution: output rows from K zero-padded float input rows each.
// Pure float code without torch headers, compiled once per ISA (depthwise_row_<isa>.cpp); an inline function
// from a shared header compiled with -mavx2 could otherwise replace the baseline copy at link time.
#pragma once

#include <cstdint>

namespace my_ops {

// Output rows 0..n-1 of a block of one plane: output row i (W floats at out + i * W) from input rows i..i+K-1,
// which start at in + i * stride, are zero-padded with K/2 zeros on each side and are followed by kRowSlack more
// readable floats. in is 64-byte aligned and stride a multiple of kRowAlign floats. weight is the K*K taps of
// this channel.
constexpr int64_t kRowSlack = 32;
constexpr int64_t kRowAlign = 16;
using DepthwiseRowsFn = void (*)(const float* in, int64_t stride, const float* weight, float* out, int64_t n,
                                 int64_t W, int64_t K);

// bfloat16 <-> float for whole rows (bit patterns as uint16_t); to_bf16 rounds to nearest even, NaN stays NaN,
// as c10::BFloat16 does.
using Bf16ToFloatFn = void (*)(const uint16_t* in, float* out, int64_t n);
using FloatToBf16Fn = void (*)(const float* in, uint16_t* out, int64_t n);

// Output rows h0..h1-1 of one H x W plane (float, or bfloat16 as uint16_t), read in place with the zero padding
// done by the kernel: no copy of the input. Only for a K that plane_kernel_takes.
using DepthwisePlaneFn = void (*)(const void* in, int64_t H, int64_t W, const float* weight, void* out, int64_t h0,
                                  int64_t h1, int64_t K);
constexpr bool plane_kernel_takes(int64_t K) { return K == 1 || K == 3 || K == 5 || K == 7; }

struct RowKernels {
  DepthwiseRowsFn rows;
  Bf16ToFloatFn from_bf16;
  FloatToBf16Fn to_bf16;
  // null where the ISA has none (the padded-row path is used)
  DepthwisePlaneFn plane_f32 = nullptr;
  DepthwisePlaneFn plane_bf16 = nullptr;
};

RowKernels row_kernels_baseline();
// false when the library was built without them (non-x86)
bool row_kernels_avx2(RowKernels* out);
bool row_kernels_avx512(RowKernels* out);
bool row_kernels_avx512_bf16(RowKernels* out);

}  // namespace my_ops
