// Included after a file's vector prelude (L floats per vector, vf, loadv, storev, splat, in its anonymous namespace):
// the attention kernel of attention.h for the ISA that file is compiled for.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "attention.h"
#include "exp_impl.h"

namespace {

using pt2rt::kernels::AttentionHead;

// kAtRows rows at a time, kAtVectors vectors of keys (the scores) or of columns (the output) in registers, each
// vector of k^T or v loaded once for the rows (AVX2: 12 sums of 16 registers; AVX-512 and NEON: 24 of 32)
constexpr int kAtRows = static_cast<int>(pt2rt::kernels::kAttentionRowBlock);
constexpr int kAtVectors = L == 16 ? 4 : 2;

// k^T [d, lkp] from k's rows, zeros past lk (the scores there are set aside in attention_softmax)
inline void attention_pack_keys(const AttentionHead& a, int64_t lkp, float* kt) {
  constexpr int64_t kKeys = 16;  // a cache line of k^T's row from 16 rows of k, which stay in L1 meanwhile
  for (int64_t j0 = 0; j0 < lkp; j0 += kKeys) {
    const int64_t n = std::min(kKeys, a.lk - j0);
    for (int64_t c = 0; c < a.d; ++c) {
      float* to = kt + c * lkp + j0;
      const float* from = a.k + j0 * a.k_rs + c;
      for (int64_t j = 0; j < n; ++j) to[j] = from[j * a.k_rs];
      for (int64_t j = std::max<int64_t>(n, 0); j < kKeys; ++j) to[j] = 0.0f;
    }
  }
}

// scores of R rows of q (from q, rows q_rs apart) for keys [j0, j0 + V * L), times scale, into s (rows lkp apart)
template <int R, int V>
inline void attention_scores(const float* q, int64_t q_rs, const float* kt, int64_t lkp, int64_t d, int64_t j0,
                             float scale, float* s) {
  vf acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = splat(0.0f);
  }
  const float* w = kt + j0;
  for (int64_t c = 0; c < d; ++c, w += lkp) {
    vf kv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) kv[v] = loadv(w + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const vf qc = splat(q[r * q_rs + c]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] += qc * kv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) storev(s + r * lkp + j0 + v * L, acc[r][v] * splat(scale));
  }
}

// One row of scores in place as p_j = e^(s_j - max s), zeros past lk; returns the sum of the p_j. As torch's softmax:
// a NaN score or a +inf one make the sum NaN (NaN - max, inf - inf), so the whole row comes out NaN; a score more
// than 86 below the row's largest weighs 0 (e^x's clamp would give it e^-86; float's own e^x underflows there); a row
// of -inf scores only weighs every key 0 and sums to 1, so it comes out 0.
inline float attention_softmax(float* s, int64_t lk, int64_t lkp) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t j = lk; j < lkp; ++j) s[j] = kNegInf;
  vf m = splat(kNegInf);
  for (int64_t j = 0; j < lkp; j += L) {
    const vf x = loadv(s + j);
    m = x > m ? x : m;  // a NaN score passes by: it reaches the sum through its p
  }
  float top = kNegInf;
  for (int i = 0; i < L; ++i) top = m[i] > top ? m[i] : top;
  if (top == kNegInf) {
    float total = 1.0f;
    for (int64_t j = 0; j < lk; ++j) total = s[j] != s[j] ? s[j] : total;  // NaN scores stay NaN
    for (int64_t j = 0; j < lkp; ++j) s[j] = 0.0f;
    return total;
  }
  const vf shift = splat(top), low = splat(-86.0f), zero = splat(0.0f);
  for (int64_t j = 0; j < lkp; j += L) {
    const vf x = loadv(s + j) - shift;
    storev(s + j, x < low ? zero : exp_v(x));
  }
  for (int64_t j = lk; j < lkp; ++j) s[j] = 0.0f;
  vf sum = splat(0.0f);
  for (int64_t j = 0; j < lkp; j += L) sum += loadv(s + j);
  float total = 0.0f;
  for (int i = 0; i < L; ++i) total += sum[i];
  return total;
}

// R rows of out, columns [c0, c0 + V * L): the sum of p_j v_j in key order, divided by the row's sum of the p_j
template <int R, int V>
inline void attention_columns(const float* p, int64_t lkp, const float* vm, int64_t v_rs, int64_t lk, int64_t c0,
                              const float* total, float* out, int64_t out_rs) {
  vf acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = splat(0.0f);
  }
  const float* row = vm + c0;
  for (int64_t j = 0; j < lk; ++j, row += v_rs) {
    vf vv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) vv[v] = loadv(row + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const vf pj = splat(p[r * lkp + j]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] += pj * vv[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const vf t = splat(total[r]);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) storev(out + r * out_rs + c0 + v * L, acc[r][v] / t);
  }
}

template <int R>
inline void attention_output(const AttentionHead& a, const float* p, int64_t lkp, const float* total, float* out) {
  int64_t c = 0;
  for (; c + kAtVectors * L <= a.dv; c += kAtVectors * L) {
    attention_columns<R, kAtVectors>(p, lkp, a.v, a.v_rs, a.lk, c, total, out, a.out_rs);
  }
  for (; c + L <= a.dv; c += L) attention_columns<R, 1>(p, lkp, a.v, a.v_rs, a.lk, c, total, out, a.out_rs);
  for (; c < a.dv; ++c) {
    for (int r = 0; r < R; ++r) {
      float acc = 0.0f;
      for (int64_t j = 0; j < a.lk; ++j) acc += p[r * lkp + j] * a.v[j * a.v_rs + c];
      out[r * a.out_rs + c] = acc / total[r];
    }
  }
}

// R rows from row r: their scores into s, softmax, output
template <int R>
inline void attention_rows(const AttentionHead& a, const float* kt, int64_t lkp, int64_t r, float* s) {
  const float* q = a.q + r * a.q_rs;
  int64_t j = 0;
  for (; j + kAtVectors * L <= lkp; j += kAtVectors * L) {
    attention_scores<R, kAtVectors>(q, a.q_rs, kt, lkp, a.d, j, a.scale, s);
  }
  for (; j < lkp; j += L) attention_scores<R, 1>(q, a.q_rs, kt, lkp, a.d, j, a.scale, s);
  float total[R];
  for (int i = 0; i < R; ++i) total[i] = attention_softmax(s + i * lkp, a.lk, lkp);
  attention_output<R>(a, s, lkp, total, a.out + r * a.out_rs);
}

// rows [r0, r1) of one head; scratch: attention_scratch_floats, holding this head's k^T already where `packed`
void attention(const AttentionHead& a, int64_t r0, int64_t r1, float* scratch, bool packed) {
  static_assert(pt2rt::kernels::kAttentionKeyAlign % L == 0, "padded keys are whole vectors");
  if (a.lk == 0) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = 0; c < a.dv; ++c) a.out[r * a.out_rs + c] = 0.0f;
    }
    return;
  }
  const int64_t lkp = pt2rt::kernels::attention_padded_keys(a.lk);
  float* kt = scratch;
  float* s = scratch + a.d * lkp;
  if (!packed) attention_pack_keys(a, lkp, kt);
  int64_t r = r0;
  for (; r + kAtRows <= r1; r += kAtRows) attention_rows<kAtRows>(a, kt, lkp, r, s);
  static_assert(kAtRows == 6, "the cases below: every count of last rows");
  switch (r1 - r) {  // the last rows together too
    case 5: attention_rows<5>(a, kt, lkp, r, s); break;
    case 4: attention_rows<4>(a, kt, lkp, r, s); break;
    case 3: attention_rows<3>(a, kt, lkp, r, s); break;
    case 2: attention_rows<2>(a, kt, lkp, r, s); break;
    case 1: attention_rows<1>(a, kt, lkp, r, s); break;
    default: break;
  }
}

}  // namespace
