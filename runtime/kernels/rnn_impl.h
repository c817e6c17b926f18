// Included by rnn_<isa>.cpp only: the recurrence with GCC vector types of the ISA the file is compiled for.
// The recurrent product is a matrix-vector product per step and row, register-blocked: a block of gate outputs
// stays in vector accumulators while all H inputs are applied, so W_hh is read once per step from cache.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "rnn_kernel.h"

namespace {

using pt2rt::kernels::RnnMode;

#if defined(__AVX512F__)
constexpr int L = 16;
#else
constexpr int L = 8;  // AVX2's registers; elsewhere GCC splits a vector into the ones the ISA has
#endif
constexpr int kBlockVectors = 8;  // accumulators per block of gates (8 of 32 registers on AVX-512, 8 of 16 on AVX2)
constexpr int64_t kBlock = int64_t{L} * kBlockVectors;

typedef float vf __attribute__((vector_size(L * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(L * sizeof(int32_t))));

inline vf loadv(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storev(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }

// e^x for |x| <= 87 (clamped there: the gates saturate long before), within 2 ulp: 2^n e^r with |r| <= ln2 / 2
// and a degree-7 polynomial for e^r. NaN comes back as NaN.
inline vf exp_v(vf x) {
  const vf lo = splat(-87.0f), hi = splat(87.0f);
  vf c = x < lo ? lo : x;
  c = c > hi ? hi : c;
  const vf shifter = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const vf n = (c * splat(1.44269504088896341f) + shifter) - shifter;
  vf r = c - n * splat(0.693145751953125f);
  r = r - n * splat(1.428606765330187045e-06f);
  vf p = splat(1.0f / 5040);
  p = p * r + splat(1.0f / 720);
  p = p * r + splat(1.0f / 120);
  p = p * r + splat(1.0f / 24);
  p = p * r + splat(1.0f / 6);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
  vf scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const vf y = p * scale;
  return x != x ? x : y;
}

inline vf sigmoid_v(vf x) { return splat(1.0f) / (splat(1.0f) + exp_v(-x)); }

// tanh: an odd polynomial near 0 (where 1 - 2 / (1 + e^2x) would lose the digits), that form elsewhere.
inline vf tanh_v(vf x) {
  const vf x2 = x * x;
  vf p = splat(62.0f / 2835);
  p = p * x2 - splat(17.0f / 315);
  p = p * x2 + splat(2.0f / 15);
  p = p * x2 - splat(1.0f / 3);
  const vf small = x + x * x2 * p;
  const vf large = splat(1.0f) - splat(2.0f) / (splat(1.0f) + exp_v(x + x));
  const vf ax = x < splat(0.0f) ? -x : x;
  return ax < splat(0.25f) ? small : large;
}

inline float sigmoid_s(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// gh[b] = bhh + h[b] W_hh^T for the B rows of h (row b at h + b * h_b)
inline void recurrent_product(int64_t B, int64_t H, int64_t G, const float* h, int64_t h_b, const float* whh_t,
                              const float* bhh, float* gh) {
  for (int64_t b = 0; b < B; ++b) {
    const float* hb = h + b * h_b;
    float* out = gh + b * G;
    int64_t j0 = 0;
    for (; j0 + kBlock <= G; j0 += kBlock) {
      vf acc[kBlockVectors];
#pragma GCC unroll 8
      for (int v = 0; v < kBlockVectors; ++v) acc[v] = loadv(bhh + j0 + v * L);
      const float* w = whh_t + j0;
      for (int64_t k = 0; k < H; ++k, w += G) {
        const vf hk = splat(hb[k]);
#pragma GCC unroll 8
        for (int v = 0; v < kBlockVectors; ++v) acc[v] += hk * loadv(w + v * L);
      }
#pragma GCC unroll 8
      for (int v = 0; v < kBlockVectors; ++v) storev(out + j0 + v * L, acc[v]);
    }
    for (; j0 + L <= G; j0 += L) {
      vf acc = loadv(bhh + j0);
      const float* w = whh_t + j0;
      for (int64_t k = 0; k < H; ++k, w += G) acc += splat(hb[k]) * loadv(w);
      storev(out + j0, acc);
    }
    for (; j0 < G; ++j0) {
      float acc = bhh[j0];
      for (int64_t k = 0; k < H; ++k) acc += hb[k] * whh_t[k * G + j0];
      out[j0] = acc;
    }
  }
}

void rnn_steps(RnnMode mode, int64_t T, int64_t B, int64_t H, const float* gi, int64_t gi_t, int64_t gi_b,
               const float* whh_t, const float* bhh, const float* h0, float* out, int64_t out_t, int64_t out_b,
               bool reverse, float* hn, float* scratch) {
  const int64_t G = mode == RnnMode::Gru ? 3 * H : H;
  const float* h = h0;
  int64_t h_b = H;
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    recurrent_product(B, H, G, h, h_b, whh_t, bhh, scratch);
    for (int64_t b = 0; b < B; ++b) {
      const float* x = gi + t * gi_t + b * gi_b;
      const float* g = scratch + b * G;
      const float* hp = h + b * h_b;
      float* y = out + t * out_t + b * out_b;
      int64_t j = 0;
      if (mode == RnnMode::Gru) {
        for (; j + L <= H; j += L) {
          const vf r = sigmoid_v(loadv(x + j) + loadv(g + j));
          const vf z = sigmoid_v(loadv(x + H + j) + loadv(g + H + j));
          const vf n = tanh_v(loadv(x + 2 * H + j) + r * loadv(g + 2 * H + j));
          storev(y + j, n + z * (loadv(hp + j) - n));
        }
        for (; j < H; ++j) {
          const float r = sigmoid_s(x[j] + g[j]);
          const float z = sigmoid_s(x[H + j] + g[H + j]);
          const float n = std::tanh(x[2 * H + j] + r * g[2 * H + j]);
          y[j] = n + z * (hp[j] - n);
        }
      } else if (mode == RnnMode::Tanh) {
        for (; j + L <= H; j += L) storev(y + j, tanh_v(loadv(x + j) + loadv(g + j)));
        for (; j < H; ++j) y[j] = std::tanh(x[j] + g[j]);
      } else {
        for (; j + L <= H; j += L) {
          const vf a = loadv(x + j) + loadv(g + j);
          storev(y + j, a < splat(0.0f) ? splat(0.0f) : a);  // NaN stays NaN, as torch.relu
        }
        for (; j < H; ++j) {
          const float a = x[j] + g[j];
          y[j] = a < 0.0f ? 0.0f : a;
        }
      }
    }
    h = out + t * out_t;
    h_b = out_b;
  }
  for (int64_t b = 0; b < B; ++b) std::memcpy(hn + b * H, h + b * h_b, sizeof(float) * H);
}

}  // namespace
