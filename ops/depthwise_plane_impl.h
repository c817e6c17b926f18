// Included by depthwise_row_avx512*.cpp only. Depthwise rows read in place from an NCHW plane: a strip of up to
// four 16-float vectors sweeps down the rows, each input row loaded once per tap column and added into the K
// output rows it belongs to (K rotating accumulator sets); masked loads and stores give the zero padding at the
// plane's edges and the partial last vector, so no padded copy of the input is made. bfloat16 is widened on
// load and rounded to nearest even on store, as c10::BFloat16 does (by vcvtneps2bf16 where the file is built
// for AVX512-BF16).
#pragma once

// GCC 12's own _mm512_undefined_* in the conversion intrinsics trip -Wmaybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace {

// Rows per sweep: the strips of one band of rows share the input rows through L1/L2.
constexpr int64_t kBandRows = 32;
// How many rows ahead of the sweep the input is prefetched.
constexpr int64_t kPrefetchRows = 16;

template <typename T>
inline __m512 load16(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <typename T>
inline __m512 load16(const T* p, __mmask16 m) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_maskz_loadu_ps(m, p);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

template <typename T>
inline __m256i to_bf16(__m512 v) {
#if defined(__AVX512BF16__)
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
#else
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7fc0));
  return _mm512_cvtepi32_epi16(r);
#endif
}

template <typename T>
inline void store16(T* p, __m512 v) {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16<T>(v));
  }
}

template <typename T>
inline void store16(T* p, __m512 v, __mmask16 m) {
  if constexpr (std::is_same_v<T, float>) {
    _mm512_mask_storeu_ps(p, m, v);
  } else {
    _mm256_mask_storeu_epi16(p, m, to_bf16<T>(v));
  }
}

// The lanes l of a vector starting at column base with 0 <= base + l < W.
inline __mmask16 lanes(int64_t base, int64_t W) {
  const int64_t lo = std::max<int64_t>(0, -base), hi = std::min<int64_t>(16, W - base);
  if (hi <= lo) return 0;
  return static_cast<__mmask16>((0xffffu << lo) & (0xffffu >> (16 - hi)));
}

// Which sides of a strip reach past the plane: the left taps of its first vector, the right taps (and the partial
// store) of its last vector. Masked loads only there, so that few mask registers are live.
constexpr int kLeft = 1, kRight = 2;

// Output rows [h0, h1), columns [w0, w0 + 16 V) clipped to W. Input row t of the sweep (plane row h0 - P + t)
// completes output row t - (K - 1); output row o accumulates in set o % K, a constant once the sweep is unrolled
// K rows at a time (q). With kRight, only the last vector may cross W: band() keeps the one before it inside.
// Kept out of line: inlined into its caller GCC stops unrolling it, and the accumulators go to memory.
template <int K, int V, int Edges, typename T>
__attribute__((noinline)) void strip(const T* in, int64_t H, int64_t W, const float* wk, T* out, int64_t h0,
                                     int64_t h1, int64_t w0) {
  constexpr int P = K / 2;
  constexpr bool kLeftOnly = (Edges & kLeft) && !((Edges & kRight) && V == 1);
  // the last vector's masks (both edges when it is also the first)
  __mmask16 right[K] = {}, out_mask = 0xffff;
  if constexpr ((Edges & kRight) != 0) {
    out_mask = lanes(w0 + 16 * (V - 1), W);
    for (int j = 0; j < K; ++j) right[j] = lanes(w0 + 16 * (V - 1) + j - P, W);
  }
  // Every loop touching acc is unrolled early (the pragmas): SRA then turns acc into registers. Left as an array
  // with a variable index anywhere, it stays in memory, and the masked loads (which GCC assumes may read it) keep
  // every update a store.
  __m512 acc[K][V];
#pragma GCC unroll 8
  for (int s = 0; s < K; ++s) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[s][v] = _mm512_setzero_ps();
  }
  __m512 taps[K * K];
#pragma GCC unroll 49
  for (int i = 0; i < K * K; ++i) taps[i] = _mm512_set1_ps(wk[i]);
  const int64_t n = h1 - h0, rows = n + K - 1;
  for (int64_t g = 0; g < rows; g += K) {
#pragma GCC unroll 8
    for (int q = 0; q < K; ++q) {
      const int64_t t = g + q;
      const int64_t ih = h0 - P + t;
      if (ih >= 0 && ih < H && t < rows) {
        const T* r = in + ih * W + w0 - P;
        if (ih + kPrefetchRows < H) {
          const char* ahead = reinterpret_cast<const char*>(in + (ih + kPrefetchRows) * W + w0);
          for (int c = 0; c < V * 16 * static_cast<int>(sizeof(T)); c += 64) __builtin_prefetch(ahead + c, 0, 3);
        }
#pragma GCC unroll 8
        for (int j = 0; j < K; ++j) {
          __m512 x[V];
#pragma GCC unroll 4
          for (int v = 0; v < V; ++v) {
            if ((Edges & kRight) && v == V - 1) {
              x[v] = load16(r + j + 16 * v, right[j]);
            } else if (kLeftOnly && v == 0 && j < P) {
              x[v] = load16(r + j, static_cast<__mmask16>(0xffffu << (P - j)));
            } else {
              x[v] = load16(r + j + 16 * v);
            }
            // One load per vector and tap column, kept in a register for its K multiply-adds: GCC would otherwise
            // fold it into each of them (K loads instead of one, most split across cache lines).
            asm("" : "+v"(x[v]));
          }
#pragma GCC unroll 8
          for (int i = 0; i < K; ++i) {
#pragma GCC unroll 4
            for (int v = 0; v < V; ++v) {
              acc[(q - i + K) % K][v] = _mm512_fmadd_ps(taps[i * K + j], x[v], acc[(q - i + K) % K][v]);
            }
          }
        }
      }
      const int kDone = (q + 1) % K;
      const int64_t o = t - (K - 1);
      if (o >= 0 && o < n) {
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) {
          T* dst = out + (h0 + o) * W + w0 + 16 * v;
          if ((Edges & kRight) && v == V - 1) {
            store16(dst, acc[kDone][v], out_mask);
          } else {
            store16(dst, acc[kDone][v]);
          }
        }
      }
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[kDone][v] = _mm512_setzero_ps();
    }
  }
}

template <int K, int V, typename T>
void strip_at(const T* in, int64_t H, int64_t W, const float* wk, T* out, int64_t h0, int64_t h1, int64_t w0) {
  const int edges = (w0 - K / 2 < 0 ? kLeft : 0) | (w0 + 16 * V + K / 2 > W ? kRight : 0);
  switch (edges) {
    case 0: return strip<K, V, 0>(in, H, W, wk, out, h0, h1, w0);
    case kLeft: return strip<K, V, kLeft>(in, H, W, wk, out, h0, h1, w0);
    case kRight: return strip<K, V, kRight>(in, H, W, wk, out, h0, h1, w0);
    default: return strip<K, V, kLeft | kRight>(in, H, W, wk, out, h0, h1, w0);
  }
}

// Strips of up to kV vectors left to right (K * kV accumulators, the K * K taps and the loaded vectors fit the
// 32 registers). A strip's second-to-last vector must not read past W (only the last one has masks): where the
// row's last vector has fewer than K / 2 columns, the strip before it ends one vector early.
template <int K, typename T>
void band(const T* in, int64_t H, int64_t W, const float* wk, T* out, int64_t h0, int64_t h1) {
  constexpr int kV = K <= 3 ? 4 : K == 5 ? 2 : 3;  // measured best (taps that do not fit stay in memory)
  for (int64_t w0 = 0; w0 < W;) {
    int64_t v = std::min<int64_t>(kV, (W - w0 + 15) / 16);
    while (v > 1 && w0 + 16 * (v - 1) + K / 2 > W) --v;
    switch (v) {
      case 1: strip_at<K, 1>(in, H, W, wk, out, h0, h1, w0); break;
      case 2: strip_at<K, 2>(in, H, W, wk, out, h0, h1, w0); break;
      case 3: if constexpr (kV >= 3) strip_at<K, 3>(in, H, W, wk, out, h0, h1, w0); break;
      default: if constexpr (kV >= 4) strip_at<K, 4>(in, H, W, wk, out, h0, h1, w0); break;
    }
    w0 += 16 * v;
  }
}

template <typename T>
void plane_rows(const void* in, int64_t H, int64_t W, const float* weight, void* out, int64_t h0, int64_t h1,
                int64_t K) {
  float wk[49];  // K <= 7 (plane_kernel_takes)
  std::copy(weight, weight + K * K, wk);
  const T* src = static_cast<const T*>(in);
  T* dst = static_cast<T*>(out);
  for (int64_t h = h0; h < h1; h += kBandRows) {
    const int64_t e = std::min(h1, h + kBandRows);
    switch (K) {
      case 1: band<1>(src, H, W, wk, dst, h, e); break;
      case 3: band<3>(src, H, W, wk, dst, h, e); break;
      case 5: band<5>(src, H, W, wk, dst, h, e); break;
      case 7: band<7>(src, H, W, wk, dst, h, e); break;
      default: break;
    }
  }
}

}  // namespace

#pragma GCC diagnostic pop
