// Included by depthwise_row_<isa>.cpp only, inside a namespace of that ISA. Register-blocked: outputs live in
// vector accumulators while all K*K taps are applied, one accumulator chain per kernel row (FMA latency, not
// throughput, bounds a single chain), so each output is written once.
#pragma once

#include <cstdint>
#include <cstring>

namespace {

typedef float v8f __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

template <int K, int V>  // V vectors of 8 outputs from rows[i] + w, stored at out
inline void block(const float* const* rows, const float* wk, int64_t w, float* out) {
  v8f acc[K][V] = {};
#pragma GCC unroll 8
  for (int i = 0; i < K; ++i) {
    const float* r = rows[i] + w;
#pragma GCC unroll 8
    for (int j = 0; j < K; ++j) {
      const float t = wk[i * K + j];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] += t * load8(r + j + 8 * v);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    v8f s = acc[0][v];
#pragma GCC unroll 8
    for (int i = 1; i < K; ++i) s += acc[i][v];
    store8(out + 8 * v, s);
  }
}

// Two output rows (h, h+1) from K+1 input rows: each loaded vector feeds both rows' accumulators.
template <int K>
inline void block2(const float* const* rows, const float* wk, int64_t w, float* out0, float* out1) {
  v8f a0[K] = {}, a1[K] = {};
#pragma GCC unroll 8
  for (int r = 0; r <= K; ++r) {
    const float* p = rows[r] + w;
#pragma GCC unroll 8
    for (int j = 0; j < K; ++j) {
      const v8f x = load8(p + j);
      if (r < K) a0[r] += wk[r * K + j] * x;
      if (r >= 1) a1[r - 1] += wk[(r - 1) * K + j] * x;
    }
  }
  v8f s0 = a0[0], s1 = a1[0];
#pragma GCC unroll 8
  for (int i = 1; i < K; ++i) {
    s0 += a0[i];
    s1 += a1[i];
  }
  store8(out0, s0);
  store8(out1, s1);
}

template <int K>
void rows2_k(const float* const* rows, const float* weight, float* out0, float* out1, int64_t W) {
  float wk[K * K];
  for (int i = 0; i < K * K; ++i) wk[i] = weight[i];
  int64_t w = 0;
  for (; w + 8 <= W; w += 8) block2<K>(rows, wk, w, out0 + w, out1 + w);
  if (w < W) {
    float t0[8], t1[8];
    block2<K>(rows, wk, w, t0, t1);
    std::memcpy(out0 + w, t0, static_cast<size_t>(W - w) * sizeof(float));
    std::memcpy(out1 + w, t1, static_cast<size_t>(W - w) * sizeof(float));
  }
}

template <int K>
void row_k(const float* const* rows, const float* weight, float* out, int64_t W) {
  float wk[K * K];
  for (int i = 0; i < K * K; ++i) wk[i] = weight[i];
  int64_t w = 0;
  for (; w + 16 <= W; w += 16) block<K, 2>(rows, wk, w, out + w);
  for (; w + 8 <= W; w += 8) block<K, 1>(rows, wk, w, out + w);
  if (w < W) {  // reads into the rows' slack, keeps what is inside the row
    float tail[8];
    block<K, 1>(rows, wk, w, tail);
    std::memcpy(out + w, tail, static_cast<size_t>(W - w) * sizeof(float));
  }
}

void row_any(const float* const* rows, const float* weight, float* out, int64_t W, int64_t K) {
  switch (K) {
    case 1: return row_k<1>(rows, weight, out, W);
    case 3: return row_k<3>(rows, weight, out, W);
    case 5: return row_k<5>(rows, weight, out, W);
    case 7: return row_k<7>(rows, weight, out, W);
    default:
      for (int64_t w = 0; w < W; ++w) {
        float a = 0;
        for (int64_t i = 0; i < K; ++i)
          for (int64_t j = 0; j < K; ++j) a += weight[i * K + j] * rows[i][w + j];
        out[w] = a;
      }
  }
}

void rows2_any(const float* const* rows, const float* weight, float* out0, float* out1, int64_t W, int64_t K) {
  switch (K) {
    case 1: return rows2_k<1>(rows, weight, out0, out1, W);
    case 3: return rows2_k<3>(rows, weight, out0, out1, W);
    case 5: return rows2_k<5>(rows, weight, out0, out1, W);
    case 7: return rows2_k<7>(rows, weight, out0, out1, W);
    default:
      row_any(rows, weight, out0, W, K);
      row_any(rows + 1, weight, out1, W, K);
  }
}

void from_bf16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &bits, sizeof bits);
  }
}

void to_bf16(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + i, sizeof bits);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    out[i] = nan ? uint16_t{0x7fc0} : static_cast<uint16_t>(rounded);
  }
}

my_ops::RowKernels kernels() { return {&row_any, &rows2_any, &from_bf16, &to_bf16}; }

}  // namespace
