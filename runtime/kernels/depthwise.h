// Depthwise convolutions over channels-last images (libpt2rt_kernels.so's pt2rt::depthwise_conv2d, and lite's
// convolutions): pure float code without torch headers, compiled once per ISA and chosen at run time.
#pragma once

#include <cstdint>

namespace pt2rt::kernels {

// One output row of a depthwise convolution with channels contiguous (channels-last), all channels:
// out[ox * out_ps + ch] = bias[ch] + sum over taps in bounds of in[iy * in_rs + ix * in_ps + ch] * w[tap * c + ch]
// for ox < ow, ix = ox * sw - pw + kx * dw, iy = oy * sh - ph + ky * dh (in is the image's first element), taps in
// ky, kx order. Taps in the padding are skipped, as oneDNN's depthwise convolutions (eager's) skip them: an inf or
// NaN weight reaches no border output through a tap outside the image.
struct DepthwiseRow {
  const float* in;
  int64_t in_rs, in_ps, h, w;
  const float* weight;  // [kh * kw][c]
  const float* bias;    // [c], or null for none
  int64_t c, kh, kw, sh, sw, ph, pw, dh, dw;
  float* out;  // the row's first element
  int64_t out_ps, ow;
  int32_t activation = 0;  // applied to each output after its sum: a PointwiseActivation code (pointwise.h)
};
using DepthwiseRowKernel = void (*)(const DepthwiseRow& args, int64_t oy);

DepthwiseRowKernel depthwise_row_baseline();
// null when the library was built without them (not x86-64)
DepthwiseRowKernel depthwise_row_avx2();
DepthwiseRowKernel depthwise_row_avx512();

}  // namespace pt2rt::kernels
