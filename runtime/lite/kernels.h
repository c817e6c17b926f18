// The inner loops of lite's products, convolutions and attention, compiled once per instruction set
// (kernels_<isa>.cpp, from kernels_impl.h) and chosen once by cpuid. Plain float code without std templates: an
// inline function from a header compiled with -mavx512f could otherwise replace the baseline copy at link time.
#pragma once

#include <cstdint>

#include "../kernels/depthwise.h"
#include "../kernels/pointwise.h"
#include "../kernels/winograd.h"

namespace pt2rt::lite {

// c[r][j] for r < rows <= mr, j < cols <= nr (rows c_rs floats apart, columns contiguous) =
//   (accumulate ? c : init ? init[j] : 0) + sum over s < segments, p < len of a[s * mr + r][p] * b[s * len + p][j]
// a: for each segment, the rows' pointers (each at len contiguous floats: a row of a matrix, or a convolution
// tap's input channels); b: a panel of a packed right matrix ([segments * len][nr], zeros past its columns).
using MicroKernel = void (*)(int64_t segments, int64_t len, const float* const* a, const float* b, float* c,
                             int64_t c_rs, int64_t rows, int64_t cols, const float* init, bool accumulate);

// depthwise_row: runtime/kernels/depthwise.h
using pt2rt::kernels::DepthwiseRow;
using pt2rt::kernels::DepthwiseRowKernel;
// pointwise: runtime/kernels/pointwise.h
using pt2rt::kernels::PointwiseKernel;
using pt2rt::kernels::PointwiseRows;
// winograd: runtime/kernels/winograd.h
using pt2rt::kernels::WinogradConv;
using pt2rt::kernels::WinogradTilesKernel;

// The softmax of row p scaled and masked, in place: p[j] = exp(s[j] - max) / sum for j < valid, with
// s[j] = p[j] * scale + (mask ? mask[j] : 0), and 0 from valid to n (a causal row's future). Returns the row's
// logsumexp (max + log(sum)).
using SoftmaxRowKernel = float (*)(float* p, int64_t n, int64_t valid, float scale, const float* mask);

struct KernelSet {
  const char* name;
  int mr, nr;  // the micro kernel's tile
  MicroKernel micro;
  DepthwiseRowKernel depthwise_row;
  PointwiseKernel pointwise;
  WinogradTilesKernel winograd;
  SoftmaxRowKernel softmax_row;
};

KernelSet kernels_baseline();
// false where the library was built without them (not x86-64)
bool kernels_avx2(KernelSet* out);
bool kernels_avx512(KernelSet* out);

// The widest this CPU runs; $PT2RT_LITE_KERNELS (baseline, avx2, avx512) narrows it, for tests of each path.
const KernelSet& kernels();

}  // namespace pt2rt::lite
