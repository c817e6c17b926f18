// Included after a file's vector prelude (L floats per vector, vf, loadv, storev, splat, in its anonymous namespace):
// the pointwise kernel of pointwise.h for the ISA that file is compiled for.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "exp_impl.h"
#include "pointwise.h"

namespace {

// vectors of columns per tile, and rows per tile for each width: R x V accumulators, V weight vectors and a
// broadcast in the registers (AVX-512 and NEON: 32, AVX2: 16); narrow tiles take more rows so that enough
// independent sums hide the multiply-add's latency
constexpr int kPwVectors = L == 8 ? 2 : 4;
template <int V>
constexpr int pw_tile_rows() {
  if constexpr (L == 8) return V == 2 ? 6 : 12;
  return V == 4 ? 6 : V == 3 ? 8 : 12;
}

inline void pw_keep_in_register([[maybe_unused]] vf& v) {
#if defined(__AVX512F__)
  asm("" : "+v"(v));
#elif defined(__AVX__)
  asm("" : "+x"(v));
#endif
}

// The clamps as y -> t = min(max(y + shift, lo), hi) * scale, times y for hardswish: NaN kept (a comparison with
// NaN is false: the value passes), inf as eager (hardswish(-inf) = -inf * 0 = NaN). The division by 6 is a
// multiplication by 1/6, at most an ulp from eager's. The logistic ones as (silu ? y : 1) / (1 + e^-y).
struct PwActivation {
  bool any, times_y, logistic;
  vf shift, lo, hi, scale;
};

inline PwActivation pw_activation(int32_t act) {
  using namespace pt2rt::kernels;
  const float inf = __builtin_inff();
  PwActivation a{act != kPointwiseNone, act == kPointwiseHardswish || act == kPointwiseSilu,
                 act == kPointwiseSilu || act == kPointwiseSigmoid, splat(0.0f), splat(-inf), splat(inf), splat(1.0f)};
  if (act == kPointwiseRelu || act == kPointwiseRelu6) a.lo = splat(0.0f);
  if (act == kPointwiseRelu6) a.hi = splat(6.0f);
  if (act == kPointwiseHardswish || act == kPointwiseHardsigmoid) {
    a.shift = splat(3.0f), a.lo = splat(0.0f), a.hi = splat(6.0f), a.scale = splat(1.0f / 6.0f);
  }
  return a;
}

__attribute__((always_inline)) inline vf pw_clamp(vf y, const PwActivation& a) {
  vf t = y + a.shift;
  t = t < a.lo ? a.lo : t;
  t = t > a.hi ? a.hi : t;
  return t * a.scale;
}

// SiLU (times_y) or sigmoid on n vectors at p, in place: a loop of its own, where e^-y's constants stay in registers
// (on a tile's accumulators, unrolled, they did not fit beside them: constants reloaded, accumulators spilled)
__attribute__((noinline)) inline void pw_logistic(float* p, int64_t n, bool times_y) {
  const vf one = splat(1.0f);
  if (times_y) {
    for (int64_t i = 0; i < n; ++i) {
      const vf y = loadv(p + i * L);
      storev(p + i * L, y / (one + exp_v(-y)));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) storev(p + i * L, one / (one + exp_v(-loadv(p + i * L))));
  }
}

// The activation on a finished tile, in registers: each form's loop unrolled whole, so the accumulators stay
// registers (a loop over them, or a call per vector, would put them all in memory); the logistic ones through the
// tile's copy in L1 (pw_logistic)
template <int R, int V>
__attribute__((always_inline)) inline void pw_activate(vf (&acc)[R][V], const PwActivation& a) {
  if (a.logistic && R * V > 1) {
    alignas(64) float tile[R * V * L];
    for (int n = 0; n < R * V; ++n) storev(tile + n * L, acc[n / V][n % V]);
    pw_logistic(tile, R * V, a.times_y);
    for (int n = 0; n < R * V; ++n) acc[n / V][n % V] = loadv(tile + n * L);
  } else if (a.logistic) {
    const vf one = splat(1.0f);
#pragma GCC unroll 48
    for (int n = 0; n < R * V; ++n) {
      vf& y = acc[n / V][n % V];
      y = (a.times_y ? y : one) / (one + exp_v(-y));
    }
  } else if (a.times_y) {
#pragma GCC unroll 48
    for (int n = 0; n < R * V; ++n) acc[n / V][n % V] *= pw_clamp(acc[n / V][n % V], a);
  } else {
#pragma GCC unroll 48
    for (int n = 0; n < R * V; ++n) acc[n / V][n % V] = pw_clamp(acc[n / V][n % V], a);
  }
}

// the first n < L floats of v to p
inline void pw_store_part(float* p, vf v, int64_t n) {
#if defined(__AVX512F__)
  static_assert(L == 16);
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), reinterpret_cast<__m512>(v));
#else
  float part[L];
  storev(part, v);
  std::memcpy(p, part, static_cast<std::size_t>(n) * sizeof(float));
#endif
}

// act (a PointwiseActivation code) over n floats from p, in place: whole vectors, then the last n % L floats in a
// vector of their own - each value by the arithmetic of the pointwise kernel's tiles (a depthwise row's activation)
inline void pw_activate_span(float* p, int64_t n, int32_t code) {
  const PwActivation a = pw_activation(code);
  vf v[1][1];
  int64_t i = 0;
  if (a.logistic) {
    // e^x's constants stay in registers in pw_logistic's loop (inlined here they were reloaded per vector)
    pw_logistic(p, n / L, a.times_y);
    i = n / L * L;
  }
  for (; i + L <= n; i += L) {
    v[0][0] = loadv(p + i);
    pw_activate<1, 1>(v, a);
    storev(p + i, v[0][0]);
  }
  if (i < n) {
    float part[L] = {};
    std::memcpy(part, p + i, static_cast<std::size_t>(n - i) * sizeof(float));
    v[0][0] = loadv(part);
    pw_activate<1, 1>(v, a);
    pw_store_part(p + i, v[0][0], n - i);
  }
}

// rows [r0, r0 + R) x the V vectors of columns from c0
template <int R, int V>
inline void pw_tile(const pt2rt::kernels::PointwiseRows& a, int64_t r0, int64_t c0, const vf* init,
                    const PwActivation& act) {
  vf acc[R][V];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = init[v];
  const float* x = a.in + r0 * a.in_rs;
  const float* b = a.weight + c0;
#pragma GCC unroll 2
  for (int64_t p = 0; p < a.k; ++p, b += a.ldw) {
    vf bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      bv[v] = loadv(b + v * L);
      pw_keep_in_register(bv[v]);
    }
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const vf xi = splat(x[i * a.in_rs + p]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] += xi * bv[v];
    }
  }
  if (act.any) pw_activate<R, V>(acc, act);
  const int64_t left = a.cols - c0;  // columns of the tile that are outputs
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    float* out = a.out + (r0 + i) * a.out_rs + c0;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      if ((v + 1) * L <= left) storev(out + v * L, acc[i][v]);
      else if (v * L < left) pw_store_part(out + v * L, acc[i][v], left - v * L);
    }
  }
}

// the last n < R rows from r0, as tiles of n rows
template <int R, int V>
inline void pw_tail(const pt2rt::kernels::PointwiseRows& a, int64_t r0, int64_t n, int64_t c0, const vf* init,
                    const PwActivation& act) {
  if constexpr (R > 0) {
    if (n == R) return pw_tile<R, V>(a, r0, c0, init, act);
    pw_tail<R - 1, V>(a, r0, n, c0, init, act);
  }
}

template <int V>
inline void pw_columns(const pt2rt::kernels::PointwiseRows& a, int64_t c0) {
  constexpr int R = pw_tile_rows<V>();
  float start[V * L] = {};
  if (a.bias != nullptr) {
    const int64_t n = a.cols - c0 < V * L ? a.cols - c0 : V * L;
    std::memcpy(start, a.bias + c0, static_cast<std::size_t>(n) * sizeof(float));
  }
  vf init[V];
  for (int v = 0; v < V; ++v) init[v] = loadv(start + v * L);
  const PwActivation act = pw_activation(a.activation);
  int64_t r = 0;
  for (; r + R <= a.rows; r += R) pw_tile<R, V>(a, r, c0, init, act);
  if (r < a.rows) pw_tail<R - 1, V>(a, r, a.rows - r, c0, init, act);
}

// Column blocks of kPwVectors vectors (the weight's block stays in L1 while every row passes), the last one as
// narrow as the columns left
void pointwise(const pt2rt::kernels::PointwiseRows& a) {
  const int64_t vectors = (a.cols + L - 1) / L;
  for (int64_t v0 = 0; v0 < vectors; v0 += kPwVectors) {
    const int64_t c0 = v0 * L, n = vectors - v0;
    if (n >= kPwVectors) {
      pw_columns<kPwVectors>(a, c0);
    } else if constexpr (kPwVectors == 4) {
      if (n == 3) pw_columns<3>(a, c0);
      else if (n == 2) pw_columns<2>(a, c0);
      else pw_columns<1>(a, c0);
    } else {
      pw_columns<1>(a, c0);
    }
  }
}

}  // namespace
