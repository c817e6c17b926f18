// Included by rnn_<isa>.cpp only: the recurrence with GCC vector types of the ISA the file is compiled for.
// The recurrent product is a matrix-vector product per step and row, register-blocked: a block of gate outputs
// stays in vector accumulators while all H inputs are applied, so W_hh is read once per step from cache.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "rnn_kernel.h"

namespace {

using pt2rt::kernels::RnnMode;

#if defined(__AVX512F__)
constexpr int L = 16;
#else
constexpr int L = 8;  // AVX2's registers; elsewhere GCC splits a vector into the ones the ISA has
#endif
constexpr int kBlockVectors = 8;  // accumulators of one row's product (8 of 32 registers on AVX-512, 8 of 16 on AVX2)
constexpr int kRowVectors = L == 16 ? 4 : 2;  // per row when 4 rows go together: 16 of 32 registers, or 8 of 16

// pieces of a step's update cut at 16-unit multiples of a row: whole vectors, and whole cache lines where the rows
// start on one (H a multiple of 16), so two threads do not write one line there
constexpr int64_t kUnitCut = 64 / sizeof(float);

typedef float vf __attribute__((vector_size(L * sizeof(float))));

inline vf loadv(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storev(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
// every lane x: a broadcast, from memory where x is loaded (vf{} + x would be an add of 0 and a shuffle per call,
// the shuffle on a port the products need, and -0.0 would come out +0.0)
inline vf splat(float x) {
#if defined(__AVX512F__)
  return vf{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#else
  return vf{x, x, x, x, x, x, x, x};
#endif
}

}  // namespace

#include "exp_impl.h"

namespace {

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

// R rows of gh = bhh + h W_hh^T for gates [j_begin, j_end) of panel p, V vectors of gates at a time: each vector of
// W loaded once for the R rows.
template <int R, int V>
inline void product_rows(int64_t H, int64_t Gp, int64_t p, int64_t j_begin, int64_t j_end, const float* h,
                         int64_t h_b, const float* whh, const float* bhh, float* gh) {
  using pt2rt::kernels::kPanel;
  static_assert(kPanel % (V * L) == 0, "a panel is whole blocks of accumulators");
  p *= kPanel;
  const float* panel = whh + p * H;
  for (int64_t j0 = j_begin; j0 < j_end; j0 += V * L) {
    vf acc[R][V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      const vf bias = loadv(bhh + p + j0 + v * L);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][v] = bias;
    }
    const float* w = panel + j0;
    for (int64_t k = 0; k < H; ++k, w += kPanel) {
      // V vectors of W in registers, then one row's broadcast at a time: V + 1 + R * V registers
      vf wv[V];
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) wv[v] = loadv(w + v * L);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const vf hk = splat(h[r * h_b + k]);
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) acc[r][v] += hk * wv[v];
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) storev(gh + r * Gp + p + j0 + v * L, acc[r][v]);
    }
  }
}

// gh[b] = bhh + h[b] W_hh^T for the B rows of h (row b at h + b * h_b), the gates of panels [p0, p1); whh packed in
// panels (rnn_kernel.h), gh and bhh G_p = padded_gates(G) wide. One row: 8 vectors of gates per pass; several: 4
// rows of 4 vectors (AVX2: 2), so that W (the bulk of what a step reads) is read once for every 4 rows. Panel by
// panel (H x 128 gates, 128 KB at H = 256: it comes from memory or L3 once per step and stays in L2 where a whole
// W_hh, 1 MB for an LSTM of 256, does not), and in it strip by strip (the gates of one pass of 4 rows, 16 KB at
// H = 256 on AVX2), every 4 rows: a strip stays in L1 for the rows after the first 4. The panels last to first where
// `backward` (Step's); each gate's sum is the same either way.
inline void recurrent_product(int64_t B, int64_t H, int64_t Gp, int64_t p0, int64_t p1, const float* h,
                              int64_t h_b, const float* whh, const float* bhh, float* gh, bool backward) {
  using pt2rt::kernels::kPanel;
  constexpr int64_t kStrip = kRowVectors * L;
  const int64_t B4 = B / 4 * 4;
  for (int64_t i = p0; i < p1; ++i) {
    const int64_t p = backward ? p0 + p1 - 1 - i : i;
    for (int64_t j = 0; j < kPanel; j += kStrip) {
      for (int64_t b = 0; b < B4; b += 4) {
        product_rows<4, kRowVectors>(H, Gp, p, j, j + kStrip, h + b * h_b, h_b, whh, bhh, gh + b * Gp);
      }
    }
    int64_t b = B4;
    for (; b + 2 <= B; b += 2) {
      product_rows<2, kBlockVectors / 2>(H, Gp, p, 0, kPanel, h + b * h_b, h_b, whh, bhh, gh + b * Gp);
    }
    for (; b < B; ++b) product_rows<1, kBlockVectors>(H, Gp, p, 0, kPanel, h + b * h_b, h_b, whh, bhh, gh + b * Gp);
  }
}

// V vectors of units of a GRU's or an LSTM's update side by side: each vector's work is one long serial chain (e^x,
// a division, e^x again for an LSTM's cell), so one vector at a time leaves the core waiting on it
template <int V>
inline void gru_vectors(int64_t H, const float* x, const float* g, int64_t gs, const float* hp, float* y) {
  vf r[V], z[V], n[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    r[v] = sigmoid_v(loadv(x + v * L) + loadv(g + v * L));
    z[v] = sigmoid_v(loadv(x + H + v * L) + loadv(g + gs + v * L));
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) n[v] = tanh_v(loadv(x + 2 * H + v * L) + r[v] * loadv(g + 2 * gs + v * L));
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) storev(y + v * L, n[v] + z[v] * (loadv(hp + v * L) - n[v]));
}
template <int V>
inline void lstm_vectors(int64_t H, const float* x, const float* g, int64_t gs, float* c, float* y) {
  vf o[V], cj[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    const vf i = sigmoid_v(loadv(x + v * L) + loadv(g + v * L));
    const vf f = sigmoid_v(loadv(x + H + v * L) + loadv(g + gs + v * L));
    const vf u = tanh_v(loadv(x + 2 * H + v * L) + loadv(g + 2 * gs + v * L));
    o[v] = sigmoid_v(loadv(x + 3 * H + v * L) + loadv(g + 3 * gs + v * L));
    cj[v] = f * loadv(c + v * L) + i * u;
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    storev(c + v * L, cj[v]);
    storev(y + v * L, o[v] * tanh_v(cj[v]));
  }
}

// The new state of row b for `count` units: the gates x (the input's, gate k of unit j at x[k * H + j]) and g (the
// recurrent product's, at g[k * gs + j]), the previous state hp, an LSTM's cell c (updated in place); y gets the
// state. Every pointer at the first of the units.
inline void update_state(RnnMode mode, int64_t H, int64_t count, const float* x, const float* g, int64_t gs,
                         const float* hp, float* c, float* y) {
  int64_t j = 0;
  const int64_t j_end = count;
  if (mode == RnnMode::Gru) {
    for (; j + 4 * L <= j_end; j += 4 * L) gru_vectors<4>(H, x + j, g + j, gs, hp + j, y + j);
    for (; j + L <= j_end; j += L) gru_vectors<1>(H, x + j, g + j, gs, hp + j, y + j);
    for (; j < j_end; ++j) {
      const float r = sigmoid_s(x[j] + g[j]);
      const float z = sigmoid_s(x[H + j] + g[gs + j]);
      const float n = std::tanh(x[2 * H + j] + r * g[2 * gs + j]);
      y[j] = n + z * (hp[j] - n);
    }
  } else if (mode == RnnMode::Lstm) {
    for (; j + 4 * L <= j_end; j += 4 * L) lstm_vectors<4>(H, x + j, g + j, gs, c + j, y + j);
    for (; j + L <= j_end; j += L) lstm_vectors<1>(H, x + j, g + j, gs, c + j, y + j);
    for (; j < j_end; ++j) {
      const float i = sigmoid_s(x[j] + g[j]);
      const float f = sigmoid_s(x[H + j] + g[gs + j]);
      const float u = std::tanh(x[2 * H + j] + g[2 * gs + j]);
      const float o = sigmoid_s(x[3 * H + j] + g[3 * gs + j]);
      c[j] = f * c[j] + i * u;
      y[j] = o * std::tanh(c[j]);
    }
  } else if (mode == RnnMode::Tanh) {
    for (; j + L <= j_end; j += L) storev(y + j, tanh_v(loadv(x + j) + loadv(g + j)));
    for (; j < j_end; ++j) y[j] = std::tanh(x[j] + g[j]);
  } else {
    for (; j + L <= j_end; j += L) {
      const vf a = loadv(x + j) + loadv(g + j);
      storev(y + j, a < splat(0.0f) ? splat(0.0f) : a);  // NaN stays NaN, as torch.relu
    }
    for (; j < j_end; ++j) {
      const float a = x[j] + g[j];
      y[j] = a < 0.0f ? 0.0f : a;
    }
  }
}

// One step of the recurrence, split in `parts` pieces: the product by gate panels, then the update by units (two
// hand-offs); or, with a caller's product by units, each piece's product and update of its units (one).
struct Step {
  RnnMode mode;
  int64_t B, H, Gp, ng, parts;  // ng: gates per unit
  const float *x, *h, *whh, *bhh;  // x: step t's input gates, row b at x + b * gi_b
  int64_t gi_b, h_b, out_b;
  float *gh, *cell, *y;            // y: step t's output rows
  const pt2rt::kernels::RnnProduct* by;  // the caller's product, or null: the kernel's
  // the panels last to first: every other step, so that a step begins with the panels the one before ended with,
  // still in L2 where the whole W_hh is not (1 MB for an LSTM of 256; an L2 of 512 KB keeps none of it when every
  // step reads it in one order)
  bool backward;

  // piece `part` of n: [lo, hi) of `count` items, cut at multiples of `unit`
  std::pair<int64_t, int64_t> share(int64_t part, int64_t n, int64_t count, int64_t unit) const {
    const int64_t units = (count + unit - 1) / unit;
    const int64_t lo = units * part / n * unit, hi = units * (part + 1) / n * unit;
    return {std::min(lo, count), std::min(hi, count)};
  }
  // the input gates of units [u0, u1) on their way to cache while the product runs: the input projection wrote
  // them before the recurrence (another core's cache, or memory, for the batch's rows)
  void prefetch_inputs(int64_t u0, int64_t u1) const {
    constexpr int64_t kLine = 64 / sizeof(float);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t k = 0; k < ng; ++k) {
        const float* row = x + b * gi_b + k * H;
        for (int64_t u = u0; u < u1; u += kLine) __builtin_prefetch(row + u);
        __builtin_prefetch(row + u1 - 1);
      }
    }
  }
  void product(int64_t part) const {
    const auto [p0, p1] = share(part, parts, Gp / pt2rt::kernels::kPanel, 1);
    const auto [j0, j1] = share(part, parts, H, kUnitCut);  // this piece's update (OpenMP: the same thread)
    if (j0 < j1) prefetch_inputs(j0, j1);
    recurrent_product(B, H, Gp, p0, p1, h, h_b, whh, bhh, gh, backward);
  }
  void update(int64_t part) const {
    const auto [j0, j1] = share(part, parts, H, kUnitCut);
    for (int64_t b = 0; b < B; ++b) {
      update_state(mode, H, j1 - j0, x + b * gi_b + j0, gh + b * Gp + j0, H, h + b * h_b + j0, cell + b * H + j0,
                   y + b * out_b + j0);
    }
  }
  // the caller's product and the update, a group of by->units units at a time; a group's gates go to gh at
  // B * ng * u0, row b's gate k of unit u0 + i at [(b * ng + k) * n + i] (each piece its own units' place)
  void product_and_update(int64_t part) const {
    const auto [u0, u1] = share(part, parts, H, by->units);
    for (int64_t u = u0; u < u1; u += by->units) {
      const int64_t n = std::min(by->units, H - u);
      float* g = gh + B * ng * u;
      prefetch_inputs(u, u + n);
      by->fn(by->ctx, u, h, h_b, g);
      for (int64_t b = 0; b < B; ++b) {
        update_state(mode, H, n, x + b * gi_b + u, g + b * ng * n, n, h + b * h_b + u, cell + b * H + u,
                     y + b * out_b + u);
      }
    }
  }
};

// Phases of pieces on a team of threads (rnn_kernel.h: RnnParallelFn): every piece of phase k runs after every
// piece of phase k - 1, each once. A member runs the pieces it was given, so a thread keeps its W_hh panels in its
// cache from step to step; a member that has waited kStealAfter for a piece nobody has begun (its owner descheduled,
// or members running one after another) runs that piece itself.
class Phases {
 public:
  Phases(int64_t parts, int64_t count) : parts_(parts), count_(count), claims_(new Claim[parts]) {}

  template <class Run>
  void member(int64_t p0, int64_t p1, const Run& run) {
    for (int64_t k = 0; k < count_; ++k) {
      for (int64_t p = p0; p < p1; ++p) try_run(p, k, run);
      const int64_t all = (k + 1) * parts_;
      std::chrono::steady_clock::time_point since{};
      for (uint32_t spins = 1; done_.load(std::memory_order_acquire) < all; ++spins) {
        pause();
        if (spins % 64 != 0) continue;
        const auto now = std::chrono::steady_clock::now();
        if (since == std::chrono::steady_clock::time_point{}) since = now;
        if (now - since < kStealAfter) continue;
        for (int64_t p = 0; p < parts_; ++p) try_run(p, k, run);
        std::this_thread::yield();
      }
    }
  }

 private:
  static constexpr std::chrono::microseconds kStealAfter{50};
  struct alignas(64) Claim {
    std::atomic<int64_t> phase{-1};  // the last phase whose piece was claimed
  };

  template <class Run>
  void try_run(int64_t p, int64_t k, const Run& run) {
    int64_t before = k - 1;
    if (!claims_[p].phase.compare_exchange_strong(before, k, std::memory_order_relaxed)) return;
    run(k, p);
    done_.fetch_add(1, std::memory_order_acq_rel);  // the piece's outputs, to whoever sees the phase done
  }
  static void pause() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  const int64_t parts_, count_;
  std::unique_ptr<Claim[]> claims_;
  alignas(64) std::atomic<int64_t> done_{0};
};

void rnn_steps(RnnMode mode, int64_t T, int64_t B, int64_t H, const float* gi, int64_t gi_t, int64_t gi_b,
               const float* whh, const float* bhh, const float* h0, const float* c0, float* out, int64_t out_t,
               int64_t out_b, bool reverse, float* hn, float* cn, float* scratch,
               pt2rt::kernels::RnnParallelFn parallel, int64_t parts, const pt2rt::kernels::RnnProduct* product) {
  const int64_t ng = mode == RnnMode::Gru ? 3 : mode == RnnMode::Lstm ? 4 : 1;
  const int64_t Gp = pt2rt::kernels::padded_gates(ng * H);
  float* cell = scratch + B * Gp;  // an LSTM's cell state, B x H, updated in place
  if (mode == RnnMode::Lstm) std::memcpy(cell, c0, sizeof(float) * B * H);
  // no more pieces than gate panels (the caller's product: groups of units) or cache lines of units; one when a step
  // is too small to gain from more
  parts = std::min(parts, product != nullptr ? (H + product->units - 1) / product->units : Gp / pt2rt::kernels::kPanel);
  parts = std::min(parts, (H + kUnitCut - 1) / kUnitCut);
  if (parallel == nullptr || B * H * Gp < pt2rt::kernels::kSplitStepFrom) parts = 1;
  parts = std::max<int64_t>(parts, 1);
  const auto time = [&](int64_t s) { return reverse ? T - 1 - s : s; };
  const auto step_at = [&](int64_t s) {
    const float* h = s == 0 ? h0 : out + time(s - 1) * out_t;
    return Step{mode, B, H, Gp, ng, parts, gi + time(s) * gi_t, h, whh, bhh, gi_b, s == 0 ? H : out_b, out_b,
                scratch, cell, out + time(s) * out_t, product, s % 2 == 1};
  };
  if (parts == 1) {
    for (int64_t s = 0; s < T; ++s) {
      const Step step = step_at(s);
      if (product != nullptr) {
        step.product_and_update(0);
      } else {
        step.product(0);
        step.update(0);
      }
    }
  } else {
    // a caller's product: one phase a step (a piece reads only its units' gates); the kernel's: the product, then
    // the update, which reads every piece's gates
    Phases phases(parts, product != nullptr ? T : 2 * T);
    const auto run_piece = [&](int64_t k, int64_t part) {
      if (product != nullptr) {
        step_at(k).product_and_update(part);
      } else if (k % 2 == 0) {
        step_at(k / 2).product(part);
      } else {
        step_at(k / 2).update(part);
      }
    };
    struct Team {
      Phases* phases;
      const decltype(run_piece)* run;
    } team{&phases, &run_piece};
    parallel(parts, &team, [](void* ctx, int64_t p0, int64_t p1) {
      const auto& t = *static_cast<const Team*>(ctx);
      t.phases->member(p0, p1, *t.run);
    });
  }
  const float* h = T == 0 ? h0 : out + time(T - 1) * out_t;
  const int64_t h_b = T == 0 ? H : out_b;
  for (int64_t b = 0; b < B; ++b) std::memcpy(hn + b * H, h + b * h_b, sizeof(float) * H);
  if (mode == RnnMode::Lstm) std::memcpy(cn, cell, sizeof(float) * B * H);
}

}  // namespace
