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
// multiplication by 1/6, at most an ulp from eager's. The logistic ones as (silu ? y : 1) / (1 + e^-y); GELU as
// eager's (pw_gelu). Those with e^x go through the tile's copy in L1 (in_l1).
struct PwActivation {
  bool any, times_y, logistic, gelu, in_l1;
  vf shift, lo, hi, scale;
};

inline PwActivation pw_activation(int32_t act) {
  using namespace pt2rt::kernels;
  const float inf = __builtin_inff();
  const bool logistic = act == kPointwiseSilu || act == kPointwiseSigmoid, gelu = act == kPointwiseGelu;
  PwActivation a{act != kPointwiseNone, act == kPointwiseHardswish || act == kPointwiseSilu, logistic, gelu,
                 logistic || gelu, splat(0.0f), splat(-inf), splat(inf), splat(1.0f)};
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

// GELU on n vectors at p, in place, as eager's CPU kernel computes it: y * 0.5 * (1 + erf(y / sqrt(2))) with
// erf(x) = sign(x) (1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^-x^2), t = 1 / (1 + 0.3275911 |x|)
// (Abramowitz and Stegun 7.1.26). NaN gives NaN, +inf inf, -inf NaN (-inf * 0), as eager in float64 and ATen's
// float32 (eager's float32 goes through oneDNN, whose AVX-512 code gives NaN at +inf).
__attribute__((noinline)) inline void pw_gelu(float* p, int64_t n) {
  const vf one = splat(1.0f), half = splat(0.5f);
  for (int64_t i = 0; i < n; ++i) {
    const vf y = loadv(p + i * L);
    const vf x = y * splat(0.70710678118654752f);
    const vf ax = x < splat(0.0f) ? -x : x;
    const vf t = one / (splat(0.3275911f) * ax + one);
    vf r = splat(1.061405429f) * t + splat(-1.453152027f);
    r = r * t + splat(1.421413741f);
    r = r * t + splat(-0.284496736f);
    r = r * t + splat(0.254829592f);
    const vf m = one - r * t * exp_v(-(x * x));
    storev(p + i * L, y * half * (one + (x < splat(0.0f) ? -m : m)));
  }
}

// the forms with e^x (in_l1) on n vectors at p, in place
inline void pw_exp_forms(float* p, int64_t n, const PwActivation& a) {
  if (a.gelu) pw_gelu(p, n);
  else pw_logistic(p, n, a.times_y);
}

// The activation over n vectors at p, in place, out of line (a linear tile's, once per call: kept out of its many
// instantiations), each value by the arithmetic of pw_activate
__attribute__((noinline)) inline void pw_activate_vectors(float* p, int64_t n, const PwActivation& a) {
  if (a.in_l1) return pw_exp_forms(p, n, a);
  for (int64_t i = 0; i < n; ++i) {
    const vf y = loadv(p + i * L);
    storev(p + i * L, a.times_y ? y * pw_clamp(y, a) : pw_clamp(y, a));
  }
}

// The activation on a finished tile, in registers: each form's loop unrolled whole, so the accumulators stay
// registers (a loop over them, or a call per vector, would put them all in memory); those with e^x through the
// tile's copy in L1
template <int R, int V>
__attribute__((always_inline)) inline void pw_activate(vf (&acc)[R][V], const PwActivation& a) {
  if (a.in_l1) {
    alignas(64) float tile[R * V * L];
    for (int n = 0; n < R * V; ++n) storev(tile + n * L, acc[n / V][n % V]);
    pw_exp_forms(tile, R * V, a);
    for (int n = 0; n < R * V; ++n) acc[n / V][n % V] = loadv(tile + n * L);
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
  if (a.in_l1) {
    // e^x's constants stay in registers in the form's loop (inlined here they were reloaded per vector)
    pw_exp_forms(p, n / L, a);
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

// acc[i][v] += x[i * in_rs + p] * (weight vector v of row p: b + p * b_rs + v * b_vs) for p < k, in p order
template <int R, int V>
__attribute__((always_inline)) inline void pw_sums(vf (&acc)[R][V], const float* x, int64_t in_rs, const float* b,
                                                   int64_t b_rs, int64_t b_vs, int64_t k) {
#pragma GCC unroll 2
  for (int64_t p = 0; p < k; ++p, b += b_rs) {
    vf bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      bv[v] = loadv(b + v * b_vs);
      pw_keep_in_register(bv[v]);
    }
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const vf xi = splat(x[i * in_rs + p]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] += xi * bv[v];
    }
  }
}

// the tile's R rows to out (rows out_rs floats apart), the first `left` columns of its V vectors
template <int R, int V>
__attribute__((always_inline)) inline void pw_store_tile(const vf (&acc)[R][V], float* out, int64_t out_rs,
                                                         int64_t left) {
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      if ((v + 1) * L <= left) storev(out + i * out_rs + v * L, acc[i][v]);
      else if (v * L < left) pw_store_part(out + i * out_rs + v * L, acc[i][v], left - v * L);
    }
  }
}

// rows [r0, r0 + R) x the V vectors of columns from c0
template <int R, int V>
inline void pw_tile(const pt2rt::kernels::PointwiseRows& a, int64_t r0, int64_t c0, const vf* init,
                    const PwActivation& act) {
  vf acc[R][V];
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = init[v];
  pw_sums<R, V>(acc, a.in + r0 * a.in_rs, a.in_rs, a.weight + c0, a.ldw, L, a.k);
  if (act.any) pw_activate<R, V>(acc, act);
  pw_store_tile<R, V>(acc, a.out + r0 * a.out_rs + c0, a.out_rs, a.cols - c0);
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

// the bias from column c0 as V vectors (zeros past cols, or everywhere without a bias)
template <int V>
inline void pw_bias_vectors(const float* bias, int64_t c0, int64_t cols, vf (&init)[V]) {
  float start[V * L] = {};
  if (bias != nullptr) {
    const int64_t n = cols - c0 < V * L ? cols - c0 : V * L;
    std::memcpy(start, bias + c0, static_cast<std::size_t>(n) * sizeof(float));
  }
  for (int v = 0; v < V; ++v) init[v] = loadv(start + v * L);
}

template <int V>
inline void pw_columns(const pt2rt::kernels::PointwiseRows& a, int64_t c0) {
  constexpr int R = pw_tile_rows<V>();
  vf init[V];
  pw_bias_vectors<V>(a.bias, c0, a.cols, init);
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

// pt2rt::linear (pointwise.h's LinearRows): the pointwise kernel's tiles over a weight in panels of 16 columns, in
// blocks that keep what a tile reads near the core: for each group of kLinGroup columns and kLinDepth of the weight's
// rows (L2: read from memory once, however many rows pass), up to kLinRowBlock rows of x by those kLinDepth columns
// (L2) pass under each panel's kLinDepth rows (L1) before the next panel, whose rows are fetched meanwhile; each
// output's sum goes on from where the block before left it in out, so it adds its products in p order whatever the
// blocks.
constexpr int64_t kLinGroup = 128;     // a multiple of every tile's columns
constexpr int64_t kLinRowBlock = 144;  // a multiple of every tile's rows
constexpr int64_t kLinDepth = L == 16 ? 128 : 256;
constexpr int64_t kLinPanel = pt2rt::kernels::kLinearPanel;
static_assert(kLinRowBlock % 24 == 0 && kLinGroup % (kPwVectors * L) == 0 && kLinGroup % kLinPanel == 0);
static_assert(kLinPanel % L == 0 && (kPwVectors * L <= kLinPanel || L == kLinPanel));

// the first n < L floats at p, zeros after them
inline vf pw_load_part(const float* p, int64_t n) {
  float part[L] = {};
  std::memcpy(part, p, static_cast<std::size_t>(n) * sizeof(float));
  return loadv(part);
}

// a finished linear tile's activation, through its copy in L1 and the out-of-line loop (once per tile)
template <int R, int V>
inline void lin_activate(vf (&acc)[R][V], const PwActivation& act) {
  if (!act.any) return;
  alignas(64) float tile[R * V * L];
  for (int n = 0; n < R * V; ++n) storev(tile + n * L, acc[n / V][n % V]);
  pw_activate_vectors(tile, R * V, act);
  for (int n = 0; n < R * V; ++n) acc[n / V][n % V] = loadv(tile + n * L);
}

struct LinBlock {
  int64_t k0, k1;  // x's columns (the weight's rows) of this block
  const vf* init;  // the bias' vectors from the tile's first column, for the block of k0 = 0
  PwActivation act;  // after the last block
};

// rows [r0, r0 + R) x the V vectors of columns from c0, the products of the block's k0..k1
template <int R, int V>
inline void lin_tile(const pt2rt::kernels::LinearRows& a, int64_t r0, int64_t c0, const LinBlock& blk) {
  vf acc[R][V];
  float* out = a.out + r0 * a.out_rs + c0;
  const int64_t left = a.cols - c0;
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) {
      if (blk.k0 == 0) acc[i][v] = blk.init[v];
      else if ((v + 1) * L <= left) acc[i][v] = loadv(out + i * a.out_rs + v * L);
      else acc[i][v] = pw_load_part(out + i * a.out_rs + v * L, left - v * L);
    }
  }
  // vector v of the tile: within the panel of c0 (L < 16), or the v-th panel from it (L == 16)
  const float* b = a.weight + c0 / kLinPanel * a.k * kLinPanel + c0 % kLinPanel + blk.k0 * kLinPanel;
  pw_sums<R, V>(acc, a.in + r0 * a.in_rs + blk.k0, a.in_rs, b, kLinPanel, L == kLinPanel ? a.k * kLinPanel : L,
                blk.k1 - blk.k0);
  if (blk.k1 == a.k) lin_activate<R, V>(acc, blk.act);
  pw_store_tile<R, V>(acc, out, a.out_rs, left);
}

template <int R, int V>
inline void lin_tail(const pt2rt::kernels::LinearRows& a, int64_t r0, int64_t n, int64_t c0, const LinBlock& blk) {
  if constexpr (R > 0) {
    if (n == R) return lin_tile<R, V>(a, r0, c0, blk);
    lin_tail<R - 1, V>(a, r0, n, c0, blk);
  }
}

// rows [r0, r0 + n) x the V vectors of columns from c0 (of a group of columns ending at c1), products k0..k1
struct LinPass {
  int64_t r0, n, c0, c1, k0, k1;
};

// rows per tile at every width (narrow tiles, a layer's last columns, with fewer sums than the pointwise kernel's:
// fewer instantiations)
constexpr int kLinRows = 6;
static_assert(pw_tile_rows<kPwVectors>() == kLinRows);

template <int V>
inline void lin_columns(const pt2rt::kernels::LinearRows& a, const LinPass& pass, const PwActivation& act) {
  constexpr int R = kLinRows;
  const int64_t r0 = pass.r0, n = pass.n, c0 = pass.c0, k0 = pass.k0, k1 = pass.k1;
  vf init[V];
  pw_bias_vectors<V>(a.bias, c0, a.cols, init);
  const LinBlock blk{k0, k1, init, act};
  // the group's next V vectors' weight rows of this block (the next panels) into L2 while the first block of rows
  // passes, a share before each tile (all at once, the prefetches queue up behind each other's misses)
  const int64_t next = c0 + V * L;
  const char* ahead = nullptr;
  int64_t lines = 0, panel_lines = 0;
  if (next < pass.c1 && pass.r0 == 0) {  // later blocks of rows find them in L2
    ahead = reinterpret_cast<const char*>(a.weight + (next / kLinPanel * a.k + k0) * kLinPanel);
    panel_lines = (k1 - k0) * kLinPanel * static_cast<int64_t>(sizeof(float)) / 64;
    const int64_t cols = pass.c1 - next < V * L ? pass.c1 - next : V * L;  // the group's, no further
    lines = panel_lines * ((cols + kLinPanel - 1) / kLinPanel);
  }
  const int64_t tiles = (n + R - 1) / R, share = (lines + tiles - 1) / tiles;
  int64_t fetched = 0;
  const auto fetch_share = [&] {
    for (const int64_t end = fetched + share < lines ? fetched + share : lines; fetched < end; ++fetched)
      __builtin_prefetch(ahead + (fetched / panel_lines * a.k * kLinPanel * static_cast<int64_t>(sizeof(float))) +
                             fetched % panel_lines * 64, 0, 2);
  };
  // whole tiles, then what is left: a last tile under half of R rows goes with the whole one before it, as two
  // tiles of about half that (their sums enough to keep the multiply-adds busy: 2 rows of 2 vectors are 4)
  const int64_t end = r0 + n, tail = n % R;
  const int64_t whole_end = end - tail - (tail > 0 && tail < R / 2 && n > R ? R : 0);
  int64_t r = r0;
  for (; r < whole_end; r += R) {
    fetch_share();
    lin_tile<R, V>(a, r, c0, blk);
  }
  if (end - r > R) {
    const int64_t first = (end - r + 1) / 2;
    fetch_share();
    lin_tail<R - 1, V>(a, r, first, c0, blk);
    r += first;
  }
  if (r < end) {
    fetch_share();
    lin_tail<R, V>(a, r, end - r, c0, blk);
  }
}

// A call of one or two rows (a classifier at batch 1): a tile of R rows spans P panels, so that enough sums hide the
// multiply-add's latency (one row of one panel had 2 on AVX2: MobileNetV3-Small's 1-row classifier took 1.09x MKL's
// matrix-vector time in the model); each output's sum from the bias in input order as in the blocked tiles, the
// same bits
constexpr int kLinFewSums = L == 16 ? 24 : 12;
template <int R, int P>
inline void lin_few_tile(const pt2rt::kernels::LinearRows& a, int64_t q0, const PwActivation& act) {
  constexpr int NV = kLinPanel / L, V = P * NV;
  vf acc[R][V], init[V];
  pw_bias_vectors<V>(a.bias, q0 * kLinPanel, a.cols, init);
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < V; ++v) acc[i][v] = init[v];
  const float* w = a.weight + q0 * a.k * kLinPanel;
  for (int64_t p = 0; p < a.k; ++p) {
    vf bv[V];
#pragma GCC unroll 24
    for (int v = 0; v < V; ++v) bv[v] = loadv(w + (v / NV) * a.k * kLinPanel + p * kLinPanel + (v % NV) * L);
#pragma GCC unroll 2
    for (int i = 0; i < R; ++i) {
      const vf xi = splat(a.in[i * a.in_rs + p]);
#pragma GCC unroll 24
      for (int v = 0; v < V; ++v) acc[i][v] += xi * bv[v];
    }
  }
  lin_activate<R, V>(acc, act);
  pw_store_tile<R, V>(acc, a.out + q0 * kLinPanel, a.out_rs, a.cols - q0 * kLinPanel);
}

template <int R>
inline void lin_few_rows(const pt2rt::kernels::LinearRows& a, const PwActivation& act) {
  constexpr int P = kLinFewSums / (R * (kLinPanel / L)) > 0 ? kLinFewSums / (R * (kLinPanel / L)) : 1;
  const int64_t panels = (a.cols + kLinPanel - 1) / kLinPanel;
  int64_t q = 0;
  for (; q + P <= panels; q += P) lin_few_tile<R, P>(a, q, act);
  for (; q < panels; ++q) lin_few_tile<R, 1>(a, q, act);
}

void linear(const pt2rt::kernels::LinearRows& a) {
  if (a.rows <= 0 || a.cols <= 0) return;
  const PwActivation act = pw_activation(a.activation);
  if (a.rows == 1) return lin_few_rows<1>(a, act);
  if (a.rows == 2) return lin_few_rows<2>(a, act);
  const int64_t blocks = a.k > kLinDepth ? (a.k + kLinDepth - 1) / kLinDepth : 1;
  const int64_t depth = (a.k + blocks - 1) / blocks;
  // rows in as few blocks as kLinRowBlock allows, each a multiple of 24 rows but the last
  const int64_t row_blocks = (a.rows + kLinRowBlock - 1) / kLinRowBlock;
  const int64_t row_block = ((a.rows + row_blocks - 1) / row_blocks + 23) / 24 * 24;
  for (int64_t g0 = 0; g0 < a.cols; g0 += kLinGroup) {
    const int64_t g1 = a.cols - g0 < kLinGroup ? a.cols : g0 + kLinGroup;
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t k0 = block * depth, k1 = block + 1 == blocks ? a.k : k0 + depth;
      for (int64_t r0 = 0; r0 < a.rows; r0 += row_block) {
        const int64_t n = a.rows - r0 < row_block ? a.rows - r0 : row_block;
        for (int64_t c0 = g0; c0 < g1; c0 += kPwVectors * L) {
          const int64_t left = (g1 - c0 + L - 1) / L;
          const LinPass pass{r0, n, c0, g1, k0, k1};
          if (left >= kPwVectors) {
            lin_columns<kPwVectors>(a, pass, act);
          } else if constexpr (kPwVectors == 4) {
            if (left == 3) lin_columns<3>(a, pass, act);
            else if (left == 2) lin_columns<2>(a, pass, act);
            else lin_columns<1>(a, pass, act);
          } else {
            lin_columns<1>(a, pass, act);
          }
        }
      }
    }
  }
}

}  // namespace
