// Included after a file's vector prelude (L floats per vector, vf, loadv, storev, in its anonymous namespace):
// the depthwise row kernel of depthwise.h for the ISA that file is compiled for.
#pragma once

#include <cstdint>

#include "depthwise.h"

namespace {

inline int64_t dw_min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t dw_max(int64_t a, int64_t b) { return a > b ? a : b; }

// The taps of output o that fall inside the input: k in [*k0, *k1)
inline void taps_inside(int64_t o, int64_t s, int64_t p, int64_t d, int64_t k, int64_t n, int64_t* k0, int64_t* k1) {
  const int64_t first = o * s - p;  // input index of tap 0
  int64_t lo = 0, hi = k;
  if (first < 0) lo = (-first + d - 1) / d;
  if (first > n - 1) hi = lo;  // every tap past the end (a padding wider than the dilated kernel)
  else if (first + (k - 1) * d >= n) hi = dw_max(lo, (n - 1 - first) / d + 1);
  *k0 = dw_min(lo, k);
  *k1 = hi;
}

// kPix output pixels from ox0 (each at its own taps inside: kx in [kx0[p], kx1[p]), all of them unless kChecked) of
// kVec vectors of channels from c0: each weight vector is loaded once for the kPix pixels. Every output sums its
// taps in ky, kx order whatever the block, so the blocking changes no bit.
template <int kVec, int kPix, bool kChecked>
inline void depthwise_block(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                            int64_t ox0, const int64_t* kx0, const int64_t* kx1, int64_t c0) {
  vf acc[kPix][kVec];
  for (int v = 0; v < kVec; ++v) {
    const vf b = loadv(d.bias + c0 + v * L);
    for (int p = 0; p < kPix; ++p) acc[p][v] = b;
  }
  const int64_t ix0 = ox0 * d.sw - d.pw, step = d.sw * d.in_ps;
  int64_t kx_lo = 0, kx_hi = d.kw;
  if (kChecked) {
    kx_lo = kx0[0], kx_hi = kx1[0];
    for (int p = 1; p < kPix; ++p) kx_lo = dw_min(kx_lo, kx0[p]), kx_hi = dw_max(kx_hi, kx1[p]);
  }
  for (int64_t ky = ky0; ky < ky1; ++ky) {
    const float* row = d.in + (iy0 + ky * d.dh) * d.in_rs + c0;
    const float* wrow = d.weight + ky * d.kw * d.c + c0;
    for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
      vf wv[kVec];
      for (int v = 0; v < kVec; ++v) wv[v] = loadv(wrow + kx * d.c + v * L);
      const float* x = row + (ix0 + kx * d.dw) * d.in_ps;
#pragma GCC unroll 8
      for (int p = 0; p < kPix; ++p) {
        if (kChecked && (kx < kx0[p] || kx >= kx1[p])) continue;
#pragma GCC unroll 4
        for (int v = 0; v < kVec; ++v) acc[p][v] += loadv(x + p * step + v * L) * wv[v];
      }
    }
  }
  for (int p = 0; p < kPix; ++p)
    for (int v = 0; v < kVec; ++v) storev(d.out + (ox0 + p) * d.out_ps + c0 + v * L, acc[p][v]);
}

// Outputs [ox0, ox0 + kPix), every channel: whole vectors in pairs, then one, then the channels past them
template <int kPix, bool kChecked>
inline void depthwise_pixels(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                             int64_t ox0, const int64_t* kx0, const int64_t* kx1) {
  const int64_t c1 = d.c;
  int64_t c0 = 0;
  for (; c0 + 2 * L <= c1; c0 += 2 * L) depthwise_block<2, kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0);
  for (; c0 + L <= c1; c0 += L) depthwise_block<1, kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0);
  if (c0 == c1) return;
  for (int p = 0; p < kPix; ++p) {
    const int64_t ox = ox0 + p, ix0 = ox * d.sw - d.pw;
    const int64_t lo = kChecked ? kx0[p] : 0, hi = kChecked ? kx1[p] : d.kw;
    float* out = d.out + ox * d.out_ps;
    for (int64_t ch = c0; ch < c1; ++ch) {
      float acc = d.bias[ch];
      for (int64_t ky = ky0; ky < ky1; ++ky)
        for (int64_t kx = lo; kx < hi; ++kx)
          acc += d.in[(iy0 + ky * d.dh) * d.in_rs + (ix0 + kx * d.dw) * d.in_ps + ch] *
                 d.weight[(ky * d.kw + kx) * d.c + ch];
      out[ch] = acc;
    }
  }
}

// pixels per block: 2 x 4 accumulators and 2 weight vectors fit AVX2's 16 registers (6 pixels, and blocks of
// channels with the pixels inside them, measured no faster on an AMD EPYC)
constexpr int kDepthwisePixels = 4;

void depthwise_row(const pt2rt::kernels::DepthwiseRow& d, int64_t oy) {
  int64_t ky0, ky1;
  taps_inside(oy, d.sh, d.ph, d.dh, d.kh, d.h, &ky0, &ky1);
  const int64_t iy0 = oy * d.sh - d.ph;
  // the outputs whose taps are all inside the row: ox * sw - pw >= 0 and ox * sw - pw + (kw - 1) * dw <= w - 1
  const int64_t inner0 = (d.pw + d.sw - 1) / d.sw;
  const int64_t last = d.w - 1 + d.pw - (d.kw - 1) * d.dw;
  const int64_t inner1 = last < 0 ? 0 : dw_min(d.ow, last / d.sw + 1);
  int64_t kx0[kDepthwisePixels], kx1[kDepthwisePixels];
  for (int64_t ox = 0; ox < d.ow;) {
    const int64_t n = dw_min(kDepthwisePixels, d.ow - ox);
    if (n == kDepthwisePixels && ox >= inner0 && ox + n <= inner1) {
      depthwise_pixels<kDepthwisePixels, false>(d, iy0, ky0, ky1, ox, kx0, kx1);
    } else if (n == kDepthwisePixels) {
      for (int p = 0; p < n; ++p) taps_inside(ox + p, d.sw, d.pw, d.dw, d.kw, d.w, &kx0[p], &kx1[p]);
      depthwise_pixels<kDepthwisePixels, true>(d, iy0, ky0, ky1, ox, kx0, kx1);
    } else {
      for (int64_t p = 0; p < n; ++p) {
        taps_inside(ox + p, d.sw, d.pw, d.dw, d.kw, d.w, &kx0[0], &kx1[0]);
        depthwise_pixels<1, true>(d, iy0, ky0, ky1, ox + p, kx0, kx1);
      }
    }
    ox += n;
  }
}

}  // namespace
