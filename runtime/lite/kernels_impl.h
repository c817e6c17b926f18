// Included by kernels_<isa>.cpp only: everything here is local to the file that includes it, compiled for that
// file's instruction set (the vector width follows the compiler's flags).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <sleef.h>
#endif

namespace {

// L floats per vector, NV vectors per micro-kernel row (NR = L * NV columns), MR rows: MR * NV accumulators,
// with NV + 1 registers left for the loads (AVX-512: 32 registers, AVX2 and SSE: 16, NEON: 32).
#if defined(__AVX512F__)
constexpr int L = 16, NV = 4, MR = 6;
#elif defined(__AVX2__)
constexpr int L = 8, NV = 2, MR = 6;
#elif defined(__aarch64__)
constexpr int L = 4, NV = 4, MR = 4;
#else
constexpr int L = 4, NV = 2, MR = 4;
#endif
constexpr int NR = L * NV;

typedef float vf __attribute__((vector_size(L * sizeof(float))));

inline vf loadv(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void storev(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

// x in every lane (x - 0 is x for every float, -0 and NaN included, so it folds away; x + 0 would not)
inline vf splat(float x) { return x - vf{}; }

// A vector loaded once for several FMAs stays in a register (GCC would otherwise fold the load into each FMA).
inline void keep_in_register([[maybe_unused]] vf& v) {
#if defined(__AVX512F__)
  asm("" : "+v"(v));
#elif defined(__AVX__)
  asm("" : "+x"(v));
#endif
}

// R rows by V of the panel's NV vectors (the columns past V * L of a narrow matrix are not computed)
template <int R, int V>
void micro_rows(int64_t segments, int64_t len, const float* const* a, const float* b, float* c, int64_t c_rs,
                int64_t cols, const float* init, bool accumulate) {
  constexpr int W = V * L;
  vf acc[R][V];
  const bool full = cols == W;
  float edge[R][W];  // the tile where it has fewer than W columns
  if (accumulate) {
    for (int i = 0; i < R; ++i) {
      if (!full) {
        std::memset(edge[i], 0, sizeof edge[i]);
        std::memcpy(edge[i], c + i * c_rs, static_cast<std::size_t>(cols) * sizeof(float));
      }
      for (int v = 0; v < V; ++v) acc[i][v] = loadv((full ? c + i * c_rs : edge[i]) + v * L);
    }
  } else {
    vf start[V] = {};
    if (init != nullptr) {
      float row[W] = {};
      std::memcpy(row, init, static_cast<std::size_t>(cols) * sizeof(float));
      for (int v = 0; v < V; ++v) start[v] = loadv(row + v * L);
    }
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < V; ++v) acc[i][v] = start[v];
  }
  for (int64_t s = 0; s < segments; ++s, b += len * NR) {
    const float* rows[R];
    for (int i = 0; i < R; ++i) rows[i] = a[s * MR + i];
    for (int64_t p = 0; p < len; ++p) {
      vf bv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        bv[v] = loadv(b + p * NR + v * L);
        keep_in_register(bv[v]);
      }
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const vf x = splat(rows[i][p]);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[i][v] += x * bv[v];
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    if (full) {
      for (int v = 0; v < V; ++v) storev(c + i * c_rs + v * L, acc[i][v]);
    } else {
      for (int v = 0; v < V; ++v) storev(edge[i] + v * L, acc[i][v]);
      std::memcpy(c + i * c_rs, edge[i], static_cast<std::size_t>(cols) * sizeof(float));
    }
  }
}

template <int R, int V>
void micro_upto(int64_t segments, int64_t len, const float* const* a, const float* b, float* c, int64_t c_rs,
                int64_t rows, int64_t cols, const float* init, bool accumulate) {
  if constexpr (R > 0) {
    if (rows == R) {
      if constexpr (V > 1)
        if (cols <= (V - 1) * L) return micro_upto<R, V - 1>(segments, len, a, b, c, c_rs, rows, cols, init, accumulate);
      return micro_rows<R, V>(segments, len, a, b, c, c_rs, cols, init, accumulate);
    }
    micro_upto<R - 1, V>(segments, len, a, b, c, c_rs, rows, cols, init, accumulate);
  }
}

void micro(int64_t segments, int64_t len, const float* const* a, const float* b, float* c, int64_t c_rs,
           int64_t rows, int64_t cols, const float* init, bool accumulate) {
  micro_upto<MR, NV>(segments, len, a, b, c, c_rs, rows, cols, init, accumulate);
}

}  // namespace

#include "../kernels/depthwise_impl.h"
#include "../kernels/pointwise_impl.h"
#include "../kernels/winograd_impl.h"

namespace {

inline vf expv(vf x) {
#if defined(__AVX512F__)
  return Sleef_expf16_u10avx512f(x);
#elif defined(__AVX2__)
  return Sleef_expf8_u10avx2(x);
#else
  for (int i = 0; i < L; ++i) x[i] = __builtin_expf(x[i]);
  return x;
#endif
}

float softmax_row(float* p, int64_t n, int64_t valid, float scale, const float* mask) {
  vf mv = splat(-__builtin_inff());
  int64_t j = 0;
  for (; j + L <= valid; j += L) {
    vf x = loadv(p + j) * splat(scale);
    if (mask != nullptr) x += loadv(mask + j);
    storev(p + j, x);
    mv = mv > x ? mv : x;
  }
  float m = -__builtin_inff();
  for (int i = 0; i < L; ++i) m = mv[i] > m ? mv[i] : m;
  for (; j < valid; ++j) {
    p[j] = p[j] * scale + (mask != nullptr ? mask[j] : 0.0f);
    m = p[j] > m ? p[j] : m;
  }
  vf sum{};
  for (j = 0; j + L <= valid; j += L) {
    const vf e = expv(loadv(p + j) - splat(m));
    storev(p + j, e);
    sum += e;
  }
  float total = 0.0f;
  for (int i = 0; i < L; ++i) total += sum[i];
  for (; j < valid; ++j) {
    p[j] = __builtin_expf(p[j] - m);
    total += p[j];
  }
  const vf inv = splat(1.0f / total);
  for (j = 0; j + L <= valid; j += L) storev(p + j, loadv(p + j) * inv);
  for (; j < valid; ++j) p[j] *= inv[0];
  for (j = valid; j < n; ++j) p[j] = 0.0f;
  return m + __builtin_logf(total);
}

pt2rt::lite::KernelSet kernel_set(const char* name) {
  return pt2rt::lite::KernelSet{name, MR, NR, &micro, &depthwise_row, &pointwise, &winograd_tiles,
                                &softmax_row};
}

}  // namespace
