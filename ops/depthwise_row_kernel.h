// The inner loop of the CPU depthwise convolution: one output row from K zero-padded float input rows.
// Pure float code without torch headers, compiled once per ISA (depthwise_row_<isa>.cpp); an inline function
// from a shared header compiled with -mavx2 could otherwise replace the baseline copy at link time.
#pragma once

#include <cstdint>

namespace my_ops {

// rows[i] points at input row (h + i - K/2) padded with K/2 zeros on each side (all zeros outside the image)
// and followed by kRowSlack more readable floats; weight is the K*K taps of this channel; out receives W floats.
constexpr int64_t kRowSlack = 8;
using DepthwiseRowFn = void (*)(const float* const* rows, const float* weight, float* out, int64_t W, int64_t K);
// Output rows h and h+1 at once from K+1 rows (rows[0] is input row h - K/2).
using DepthwiseRows2Fn = void (*)(const float* const* rows, const float* weight, float* out0, float* out1, int64_t W,
                                  int64_t K);

// bfloat16 <-> float for whole rows (bit patterns as uint16_t); to_bf16 rounds to nearest even, NaN stays NaN,
// as c10::BFloat16 does.
using Bf16ToFloatFn = void (*)(const uint16_t* in, float* out, int64_t n);
using FloatToBf16Fn = void (*)(const float* in, uint16_t* out, int64_t n);

struct RowKernels {
  DepthwiseRowFn conv;
  DepthwiseRows2Fn conv2;
  Bf16ToFloatFn from_bf16;
  FloatToBf16Fn to_bf16;
};

RowKernels row_kernels_baseline();
bool row_kernels_avx2(RowKernels* out);  // false when the library was built without them (non-x86)

}  // namespace my_ops
