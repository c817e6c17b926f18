// 3x3 convolutions (stride 1, no dilation, one group) over channels-last images by Winograd's F(2x2, 3x3)
// (libpt2rt_kernels.so's pt2rt::winograd_conv2d, and lite's): each 2x2 block of outputs ("tile") from the 4x4 inputs
// under it, as 16 products of the tiles' transformed inputs with the transformed weight - 16 multiply-adds per input
// channel for 4 outputs instead of 36 - then the bias and the activation (pointwise.h's codes). Pure float code
// without torch headers, compiled once per ISA and chosen at run time.
//
// Where a tile's outputs are not all finite (an inf or NaN in their inputs, or sums past float's range in the
// transforms), they are computed again directly from the 3x3 taps, so that an inf or NaN input comes out exactly where
// and as it does in eager's direct convolution (through the transforms an inf comes out NaN). Finite inputs whose
// sums pass float's range may still differ from eager's, as any two orders of summation do there.
#pragma once

#include <cstdint>

namespace pt2rt::kernels {

// Weights as export_tools.convolutions lays them out, for C_in channels in and C_out out, ldw a multiple of 16 at
// least C_out, columns C_out..ldw zeros:
//   weight [16][C_in][ldw]: G g G^T of each (in, out) pair's 3x3 taps g, G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//                           element (i, j) of the 4x4 result at [i * 4 + j]
//   taps   [3][3][C_in][ldw]: the taps themselves (for the tiles computed directly)
struct WinogradConv {
  const float* in;  // [n][h][w][c]
  int64_t n, h, w, c;
  const float* weight;
  const float* taps;
  int64_t ldw;
  const float* bias;  // C_out floats, or null for none
  float* out;         // [n][oh][ow][oc]
  int64_t oh, ow, oc;  // oh = h + 2 * pad_h - 2, ow likewise
  int64_t pad_h, pad_w;
  int32_t activation;  // a PointwiseActivation
};

constexpr int64_t winograd_tiles_h(const WinogradConv& a) { return (a.oh + 1) / 2; }
constexpr int64_t winograd_tiles_w(const WinogradConv& a) { return (a.ow + 1) / 2; }
// tiles of the whole batch, numbered image by image, then by rows of tiles
constexpr int64_t winograd_tile_count(const WinogradConv& a) {
  return a.n * winograd_tiles_h(a) * winograd_tiles_w(a);
}
// floats of scratch a call of `tiles` tiles needs (its transformed inputs and their products)
constexpr int64_t winograd_scratch_floats(const WinogradConv& a, int64_t tiles) {
  return 16 * tiles * ((a.c + 15) / 16 * 16 + a.ldw);
}

// Tiles per call for `threads` threads: at most 64 (their transformed inputs and products stay in L2 for 64
// channels), and as many calls for each thread where there are enough tiles
constexpr int64_t winograd_tiles_per_call(int64_t tiles, int64_t threads) {
  threads = threads < 1 ? 1 : threads;
  int64_t calls = (tiles + 63) / 64;
  calls = (calls + threads - 1) / threads * threads;
  calls = calls < tiles ? calls : tiles;
  return calls < 1 ? 1 : (tiles + calls - 1) / calls;
}

// The outputs of tiles [t0, t1); scratch: winograd_scratch_floats(a, t1 - t0) floats. Each output comes out the
// same whatever tiles a call covers (the products sum each row's channels in order).
using WinogradTilesKernel = void (*)(const WinogradConv& a, int64_t t0, int64_t t1, float* scratch);

WinogradTilesKernel winograd_baseline();
// null when the library was built without them (not x86-64)
WinogradTilesKernel winograd_avx2();
WinogradTilesKernel winograd_avx512();

}  // namespace pt2rt::kernels
