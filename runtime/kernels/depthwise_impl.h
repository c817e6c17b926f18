// Included after a file's vector prelude (L floats per vector, vf, loadv, storev, in its anonymous namespace):
// the depthwise row kernel of depthwise.h for the ISA that file is compiled for.
#pragma once

#include <cstdint>
#include <cstring>

#include "depthwise.h"
#include "pointwise_impl.h"  // the activation, applied to each finished row

namespace {

// W floats in a vector: the file's own (L) and, for the channels past its whole vectors, narrower ones
template <int W>
struct DwVec;
template <>
struct DwVec<4> {
  typedef float t __attribute__((vector_size(16)));
};
template <>
struct DwVec<8> {
  typedef float t __attribute__((vector_size(32)));
};
template <>
struct DwVec<16> {
  typedef float t __attribute__((vector_size(64)));
};
template <int W>
inline typename DwVec<W>::t dw_load(const float* p) {
  typename DwVec<W>::t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int W>
inline void dw_store(float* p, typename DwVec<W>::t v) {
  std::memcpy(p, &v, sizeof v);
}

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
// kVec vectors of W channels from c0: each weight vector is loaded once for the kPix pixels. Every output sums its
// taps in ky, kx order whatever the block and the vector width, so the blocking changes no bit.
template <int W, int kVec, int kPix, bool kChecked>
inline void depthwise_block(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                            int64_t ox0, const int64_t* kx0, const int64_t* kx1, int64_t c0) {
  typedef typename DwVec<W>::t v_t;
  v_t acc[kPix][kVec];
  for (int v = 0; v < kVec; ++v) {
    const v_t b = d.bias != nullptr ? dw_load<W>(d.bias + c0 + v * W) : v_t{};
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
      v_t wv[kVec];
      for (int v = 0; v < kVec; ++v) wv[v] = dw_load<W>(wrow + kx * d.c + v * W);
      const float* x = row + (ix0 + kx * d.dw) * d.in_ps;
#pragma GCC unroll 8
      for (int p = 0; p < kPix; ++p) {
        if (kChecked && (kx < kx0[p] || kx >= kx1[p])) continue;
#pragma GCC unroll 4
        for (int v = 0; v < kVec; ++v) acc[p][v] += dw_load<W>(x + p * step + v * W) * wv[v];
      }
    }
  }
  for (int p = 0; p < kPix; ++p)
    for (int v = 0; v < kVec; ++v) dw_store<W>(d.out + (ox0 + p) * d.out_ps + c0 + v * W, acc[p][v]);
}

// Outputs [ox0, ox0 + kPix) of the channels from c0 past the vectors, one by one
template <int kPix, bool kChecked>
inline void depthwise_channels_left(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                                    int64_t ox0, const int64_t* kx0, const int64_t* kx1, int64_t c0) {
  for (int p = 0; p < kPix; ++p) {
    const int64_t ox = ox0 + p, ix0 = ox * d.sw - d.pw;
    const int64_t lo = kChecked ? kx0[p] : 0, hi = kChecked ? kx1[p] : d.kw;
    float* out = d.out + ox * d.out_ps;
    for (int64_t ch = c0; ch < d.c; ++ch) {
      float acc = d.bias != nullptr ? d.bias[ch] : 0.0f;
      for (int64_t ky = ky0; ky < ky1; ++ky)
        for (int64_t kx = lo; kx < hi; ++kx)
          acc += d.in[(iy0 + ky * d.dh) * d.in_rs + (ix0 + kx * d.dw) * d.in_ps + ch] *
                 d.weight[(ky * d.kw + kx) * d.c + ch];
      out[ch] = acc;
    }
  }
}

// Outputs [ox0, ox0 + kPix), every channel: whole vectors in pairs, then one, then narrower vectors (AVX-512's 8,
// 4: MobileNets have 72, 88 and 120 channels), then the channels past them one by one
template <int kPix, bool kChecked>
inline void depthwise_pixels(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                             int64_t ox0, const int64_t* kx0, const int64_t* kx1) {
  const int64_t c1 = d.c;
  int64_t c0 = 0;
  for (; c0 + 2 * L <= c1; c0 += 2 * L) depthwise_block<L, 2, kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0);
  for (; c0 + L <= c1; c0 += L) depthwise_block<L, 1, kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0);
  if constexpr (L > 8) {
    if (c0 + 8 <= c1) depthwise_block<8, 1, kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0), c0 += 8;
  }
  if constexpr (L > 4) {
    if (c0 + 4 <= c1) depthwise_block<4, 1, kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0), c0 += 4;
  }
  if (c0 < c1) depthwise_channels_left<kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0);
}

// Stride S (1 or 2), undilated along the row, K taps a row known when compiled: each input vector loaded once for the outputs it
// reaches - (kPix - 1) S + K loads and K weight vectors per row of taps, where depthwise_block loads K (kPix + 1).
// Inputs outside the row (kChecked) are not read: each output skips its padding taps as depthwise_block does, and
// sums the others in ky, kx order - the same bits.
template <int W, int kPix, int K, int S, bool kChecked>
inline void depthwise_slide(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                            int64_t ox0, int64_t c0) {
  typedef typename DwVec<W>::t v_t;
  const v_t b = d.bias != nullptr ? dw_load<W>(d.bias + c0) : v_t{};
  v_t acc[kPix];
  for (int p = 0; p < kPix; ++p) acc[p] = b;
  const int64_t ix0 = ox0 * S - d.pw;
  for (int64_t ky = ky0; ky < ky1; ++ky) {
    const float* row = d.in + (iy0 + ky * d.dh) * d.in_rs + c0;
    const float* wrow = d.weight + ky * K * d.c + c0;
    v_t wv[K];
    for (int kx = 0; kx < K; ++kx) wv[kx] = dw_load<W>(wrow + kx * d.c);
#pragma GCC unroll 32
    for (int i = 0; i < (kPix - 1) * S + K; ++i) {
      if (kChecked && (ix0 + i < 0 || ix0 + i >= d.w)) continue;
      const v_t x = dw_load<W>(row + (ix0 + i) * d.in_ps);
#pragma GCC unroll 8
      for (int kx = 0; kx < K; ++kx) {
        const int p = (i - kx) / S;  // input i is output p's tap kx
        if (i >= kx && (i - kx) % S == 0 && p < kPix) acc[p] += x * wv[kx];
      }
    }
  }
  for (int p = 0; p < kPix; ++p) dw_store<W>(d.out + (ox0 + p) * d.out_ps + c0, acc[p]);
}

template <int kPix, int K, int S, bool kChecked>
inline void depthwise_slide_pixels(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                                   int64_t ox0) {
  const int64_t c1 = d.c;
  int64_t c0 = 0;
  for (; c0 + L <= c1; c0 += L) depthwise_slide<L, kPix, K, S, kChecked>(d, iy0, ky0, ky1, ox0, c0);
  if constexpr (L > 8) {
    if (c0 + 8 <= c1) depthwise_slide<8, kPix, K, S, kChecked>(d, iy0, ky0, ky1, ox0, c0), c0 += 8;
  }
  if constexpr (L > 4) {
    if (c0 + 4 <= c1) depthwise_slide<4, kPix, K, S, kChecked>(d, iy0, ky0, ky1, ox0, c0), c0 += 4;
  }
  if (c0 == c1) return;
  int64_t kx0[kPix], kx1[kPix];
  for (int p = 0; p < kPix; ++p) taps_inside(ox0 + p, S, d.pw, 1, K, d.w, &kx0[p], &kx1[p]);
  depthwise_channels_left<kPix, kChecked>(d, iy0, ky0, ky1, ox0, kx0, kx1, c0);
}

// Pixels [ox, ox + kPix): unchecked where every tap is inside the row ([inner0, inner1))
template <int kPix, int K, int S>
inline void depthwise_slide_span(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                                 int64_t inner0, int64_t inner1, int64_t ox) {
  const bool inside = ox >= inner0 && ox + kPix <= inner1;
  if (inside) {
    depthwise_slide_pixels<kPix, K, S, false>(d, iy0, ky0, ky1, ox);
  } else {
    depthwise_slide_pixels<kPix, K, S, true>(d, iy0, ky0, ky1, ox);
  }
}

// A row by depthwise_slide: 8 pixels at a time, then 4, then the last 1-3 as one block
template <int K, int S>
inline void depthwise_slide_row(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                                int64_t inner0, int64_t inner1) {
  int64_t ox = 0;
  for (; ox + 8 <= d.ow; ox += 8) depthwise_slide_span<8, K, S>(d, iy0, ky0, ky1, inner0, inner1, ox);
  if (ox + 4 <= d.ow) depthwise_slide_span<4, K, S>(d, iy0, ky0, ky1, inner0, inner1, ox), ox += 4;
  if (ox + 3 == d.ow) depthwise_slide_span<3, K, S>(d, iy0, ky0, ky1, inner0, inner1, ox);
  if (ox + 2 == d.ow) depthwise_slide_span<2, K, S>(d, iy0, ky0, ky1, inner0, inner1, ox);
  if (ox + 1 == d.ow) depthwise_slide_span<1, K, S>(d, iy0, ky0, ky1, inner0, inner1, ox);
}

// pixels per block: 2 x 4 accumulators and 2 weight vectors fit AVX2's 16 registers (6 pixels, and blocks of
// channels with the pixels inside them, measured no faster on an AMD EPYC); AVX-512's 32 take 2 x 8
// (EfficientNet-B0's convolutions 3 % faster than 2 x 4 on an AMD EPYC Zen 5)
constexpr int kDepthwisePixels = L == 16 ? 8 : 4;

// Pixels [ox, ox + kPix): unchecked where every tap is inside the row ([inner0, inner1))
template <int kPix>
inline void depthwise_span(const pt2rt::kernels::DepthwiseRow& d, int64_t iy0, int64_t ky0, int64_t ky1,
                           int64_t inner0, int64_t inner1, int64_t ox) {
  int64_t kx0[kPix], kx1[kPix];
  if (ox >= inner0 && ox + kPix <= inner1) {
    depthwise_pixels<kPix, false>(d, iy0, ky0, ky1, ox, kx0, kx1);
  } else {
    for (int p = 0; p < kPix; ++p) taps_inside(ox + p, d.sw, d.pw, d.dw, d.kw, d.w, &kx0[p], &kx1[p]);
    depthwise_pixels<kPix, true>(d, iy0, ky0, ky1, ox, kx0, kx1);
  }
}

void depthwise_row(const pt2rt::kernels::DepthwiseRow& d, int64_t oy) {
  int64_t ky0, ky1;
  taps_inside(oy, d.sh, d.ph, d.dh, d.kh, d.h, &ky0, &ky1);
  const int64_t iy0 = oy * d.sh - d.ph;
  // the outputs whose taps are all inside the row: ox * sw - pw >= 0 and ox * sw - pw + (kw - 1) * dw <= w - 1
  const int64_t inner0 = (d.pw + d.sw - 1) / d.sw;
  const int64_t last = d.w - 1 + d.pw - (d.kw - 1) * d.dw;
  const int64_t inner1 = last < 0 ? 0 : dw_min(d.ow, last / d.sw + 1);
  // MobileNets' and EfficientNets' forms slid over (1.3-1.8x depthwise_block's speed on an AMD EPYC Zen 3, AVX2)
  const bool slid = d.dw == 1 && (d.kw == 3 || d.kw == 5) && (d.sw == 1 || d.sw == 2);
  if (slid && d.kw == 3) {
    if (d.sw == 1) depthwise_slide_row<3, 1>(d, iy0, ky0, ky1, inner0, inner1);
    else depthwise_slide_row<3, 2>(d, iy0, ky0, ky1, inner0, inner1);
  } else if (slid) {
    if (d.sw == 1) depthwise_slide_row<5, 1>(d, iy0, ky0, ky1, inner0, inner1);
    else depthwise_slide_row<5, 2>(d, iy0, ky0, ky1, inner0, inner1);
  } else {
    int64_t ox = 0;
    for (; ox + kDepthwisePixels <= d.ow; ox += kDepthwisePixels)
      depthwise_span<kDepthwisePixels>(d, iy0, ky0, ky1, inner0, inner1, ox);
    if constexpr (kDepthwisePixels > 4) {
      if (ox + 4 <= d.ow) depthwise_span<4>(d, iy0, ky0, ky1, inner0, inner1, ox), ox += 4;
    }
    for (; ox < d.ow; ++ox) depthwise_span<1>(d, iy0, ky0, ky1, inner0, inner1, ox);
  }
  if (d.activation == pt2rt::kernels::kPointwiseNone) return;
  // the row is still in L1: one pass over it (the pixels' channels contiguous: the whole row at once)
  if (d.out_ps == d.c) {
    pw_activate_span(d.out, d.ow * d.c, d.activation);
  } else {
    for (int64_t x = 0; x < d.ow; ++x) pw_activate_span(d.out + x * d.out_ps, d.c, d.activation);
  }
}

}  // namespace
