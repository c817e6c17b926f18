// Included by depthwise_row_<isa>.cpp only. Register-blocked: outputs live in vector accumulators while all K*K
// taps are applied, so each output is written once; enough independent accumulators to hide the FMA latency.
#pragma once

#include <cstdint>
#include <cstring>

namespace {

// L floats per vector; block2 keeps 2 * kChains accumulators in registers (kChains / V per output vector), with
// room for the loads: AVX-512 has 32 vector registers of 16 floats, AVX 16 of 8, SSE 16 of 4 (a v8f takes two).
#if defined(__AVX512F__)
constexpr int L = 16;
constexpr int kWide = 4;
constexpr int kChains = 8;
#elif defined(__AVX__)
constexpr int L = 8;
constexpr int kWide = 4;
constexpr int kChains = 4;
#else
constexpr int L = 8;
constexpr int kWide = 2;
constexpr int kChains = 4;
#endif
static_assert(L <= my_ops::kRowSlack, "a partial last vector reads up to L - 1 floats past a row");

typedef float vf __attribute__((vector_size(L * sizeof(float))));

inline vf loadv(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void storev(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

// A vector loaded once for several FMAs stays in a register: GCC would otherwise fold the load into each FMA as a
// memory operand (two loads instead of one in block2, most split across cache lines).
inline void keep_in_register([[maybe_unused]] vf& v) {
#if defined(__AVX512F__)
  asm("" : "+v"(v));
#elif defined(__AVX__)
  asm("" : "+x"(v));
#endif
}

// One output row, V vectors of L outputs from rows[i] + w; one accumulator chain per kernel row and vector.
template <int K, int V>
inline void block(const float* const* rows, const float* wk, int64_t w, float* out) {
  vf acc[K][V] = {};
#pragma GCC unroll 8
  for (int i = 0; i < K; ++i) {
    const float* r = rows[i] + w;
#pragma GCC unroll 8
    for (int j = 0; j < K; ++j) {
      const float t = wk[i * K + j];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] += t * loadv(r + j + L * v);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    vf s = acc[0][v];
#pragma GCC unroll 8
    for (int i = 1; i < K; ++i) s += acc[i][v];
    storev(out + L * v, s);
  }
}

// Two output rows (h, h+1), V vectors of L outputs each, from K+1 input rows: each loaded vector feeds both
// rows. Kernel row r accumulates into a[r % S]: 2 * V * S independent FMA chains hide the FMA latency (S grows as
// V shrinks) while all accumulators stay in registers.
template <int K, int V>
inline void block2(const float* const* rows, const float* wk, int64_t w, float* out0, float* out1) {
  constexpr int S = (kChains / V < K) ? kChains / V : K;
  vf a0[S][V] = {}, a1[S][V] = {};
#pragma GCC unroll 8
  for (int r = 0; r <= K; ++r) {
    const float* p = rows[r] + w;
#pragma GCC unroll 8
    for (int j = 0; j < K; ++j) {
      vf x[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) {
        x[v] = loadv(p + j + L * v);
        keep_in_register(x[v]);
      }
      if (r < K) {
        const float t = wk[r * K + j];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) a0[r % S][v] += t * x[v];
      }
      if (r >= 1) {
        const float t = wk[(r - 1) * K + j];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) a1[(r - 1) % S][v] += t * x[v];
      }
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    vf s0 = a0[0][v], s1 = a1[0][v];
#pragma GCC unroll 4
    for (int i = 1; i < S; ++i) {
      s0 += a0[i][v];
      s1 += a1[i][v];
    }
    storev(out0 + L * v, s0);
    storev(out1 + L * v, s1);
  }
}

// A partial last vector reads into the rows' slack and keeps what is inside the row.
template <int K>
inline void pair(const float* const* rows, const float* wk, float* out0, float* out1, int64_t W) {
  int64_t w = 0;
  for (; w + L * kWide <= W; w += L * kWide) block2<K, kWide>(rows, wk, w, out0 + w, out1 + w);
  if constexpr (kWide > 2) {
    for (; w + 2 * L <= W; w += 2 * L) block2<K, 2>(rows, wk, w, out0 + w, out1 + w);
  }
  for (; w + L <= W; w += L) block2<K, 1>(rows, wk, w, out0 + w, out1 + w);
  if (w < W) {
    float t0[L], t1[L];
    block2<K, 1>(rows, wk, w, t0, t1);
    std::memcpy(out0 + w, t0, static_cast<size_t>(W - w) * sizeof(float));
    std::memcpy(out1 + w, t1, static_cast<size_t>(W - w) * sizeof(float));
  }
}

template <int K>
inline void single(const float* const* rows, const float* wk, float* out, int64_t W) {
  int64_t w = 0;
  for (; w + 2 * L <= W; w += 2 * L) block<K, 2>(rows, wk, w, out + w);
  for (; w + L <= W; w += L) block<K, 1>(rows, wk, w, out + w);
  if (w < W) {
    float tail[L];
    block<K, 1>(rows, wk, w, tail);
    std::memcpy(out + w, tail, static_cast<size_t>(W - w) * sizeof(float));
  }
}

// n output rows, two at a time; the weights are read once per call.
template <int K>
void rows_k(const float* in, int64_t stride, const float* weight, float* out, int64_t n, int64_t W) {
  float wk[K * K];
  for (int i = 0; i < K * K; ++i) wk[i] = weight[i];
  const float* rows[K + 1];
  int64_t h = 0;
  for (; h + 2 <= n; h += 2) {
    for (int i = 0; i <= K; ++i) rows[i] = in + (h + i) * stride;
    pair<K>(rows, wk, out + h * W, out + (h + 1) * W, W);
  }
  if (h < n) {
    for (int i = 0; i < K; ++i) rows[i] = in + (h + i) * stride;
    single<K>(rows, wk, out + h * W, W);
  }
}

void rows_any(const float* in, int64_t stride, const float* weight, float* out, int64_t n, int64_t W, int64_t K) {
  switch (K) {
    case 1: return rows_k<1>(in, stride, weight, out, n, W);
    case 3: return rows_k<3>(in, stride, weight, out, n, W);
    case 5: return rows_k<5>(in, stride, weight, out, n, W);
    case 7: return rows_k<7>(in, stride, weight, out, n, W);
    default:
      for (int64_t h = 0; h < n; ++h) {
        for (int64_t w = 0; w < W; ++w) {
          float a = 0;
          for (int64_t i = 0; i < K; ++i)
            for (int64_t j = 0; j < K; ++j) a += weight[i * K + j] * in[(h + i) * stride + w + j];
          out[h * W + w] = a;
        }
      }
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

my_ops::RowKernels kernels() { return {&rows_any, &from_bf16, &to_bf16}; }

}  // namespace
