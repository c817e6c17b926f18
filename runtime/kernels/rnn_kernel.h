// The recurrence of GRU, plain RNN and LSTM layers (libpt2rt_kernels.so): pure float code without torch headers,
// compiled once per ISA (rnn_<isa>.cpp) and chosen once at run time (rnn.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace pt2rt::kernels {

enum class RnnMode : int { Gru = 0, Tanh = 1, Relu = 2, Lstm = 3 };

constexpr int64_t kPanel = 128;  // gates per panel of the packed W_hh
inline int64_t padded_gates(int64_t G) { return (G + kPanel - 1) / kPanel * kPanel; }

// One direction of one layer over T steps for a batch of B rows, PyTorch's formulas (torch.nn.GRU, torch.nn.RNN,
// torch.nn.LSTM without projections):
//   gi: the input gates x_t W_ih^T + b_ih of step t, row b at gi + t * gi_t + b * gi_b (G floats: r, z, n for a
//       GRU, G = 3H; i, f, g, o for an LSTM, G = 4H; H for an RNN)
//   whh: W_hh packed in panels of kPanel gates (G rounded up to a multiple, zeros past G): panel p, row k holds what
//        h[k] adds to gates p * kPanel .. p * kPanel + kPanel - 1, each panel H x kPanel contiguous, read in order
//        every step; bhh: G, zero-padded the same way
//   h0: B x H; the state after step t goes to out + t * out_t + b * out_b (H floats), the last one to hn (B x H)
//   c0, cn: an LSTM's cell state before and after (B x H; null otherwise)
//   reverse: steps T-1 .. 0; scratch: B x (padded G + H) floats
//   parallel, parts: each step's product and state update split into `parts` pieces (every piece computes its
//   outputs exactly as one thread would), the caller's threads taking the steps together, where a step is large
//   enough to gain; null or parts <= 1: all on this thread
//   product: where not null, it computes each step's recurrent product instead of the kernel's own
// Runs member(ctx, p0, p1) over ranges that cover [0, parts) once, as many at once as the caller has threads for
// (ATen's parallel_for, an OpenMP team), and returns when every member has returned. Members wait for each other
// between a step's phases, spinning; one left waiting on a piece nobody began runs it itself, so the steps complete
// however many members run at once (a thread descheduled, members run one after another).
using RnnParallelFn = void (*)(int64_t parts, void* ctx, void (*member)(void* ctx, int64_t p0, int64_t p1));
// A caller's recurrent product, by groups of `units` units: fn computes, for the B rows of h (row b at
// h + b * h_b), every gate of units [u0, u0 + n) (u0 a multiple of `units`, n = min(units, H - u0)) with b_hh:
// row b's gate k of unit u0 + i at g[(b * gates + k) * n + i] (gates: 3 for a GRU, 4 for an LSTM, 1 for an RNN).
// A step's pieces are whole groups, each updating its own units right after its product.
struct RnnProduct {
  void* ctx;
  void (*fn)(void* ctx, int64_t u0, const float* h, int64_t h_b, float* g);
  int64_t units;
};
using RnnStepsFn = void (*)(RnnMode mode, int64_t T, int64_t B, int64_t H, const float* gi, int64_t gi_t,
                            int64_t gi_b, const float* whh, const float* bhh, const float* h0, const float* c0,
                            float* out, int64_t out_t, int64_t out_b, bool reverse, float* hn, float* cn,
                            float* scratch, RnnParallelFn parallel, int64_t parts, const RnnProduct* product);

// A step's multiply-adds from which splitting it across threads gains (each of a step's hand-offs between the
// threads costs ~1 us): an LSTM of 256 (256 x 1024 per row) splits, one of 128 does not (split on two threads at
// batch 1 it took 1.15x one thread's time, AMD EPYC Zen 5).
constexpr int64_t kSplitStepFrom = int64_t{1} << 17;

// Floats on whole 64-byte lines, for rnn_steps' scratch (B x (padded G + H) floats) and MKL's packed W_hh: the pieces of a split step write
// their own units' gates and cell states side by side, and a line two pieces share would pass between their cores at
// every step (malloc aligns to 16 bytes: an LSTM layer of 256 units at batch 8 on two threads, in a process on glibc's
// malloc, took 0.98x the time on whole lines, AMD EPYC Zen 3)
class AlignedFloats {
 public:
  explicit AlignedFloats(int64_t n)
      : data_(static_cast<float*>(
            std::aligned_alloc(64, static_cast<std::size_t>(n) * sizeof(float) / 64 * 64 + 64))) {
    if (data_ == nullptr) throw std::bad_alloc();
  }
  ~AlignedFloats() { std::free(data_); }
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  float* data() const { return data_; }

 private:
  float* data_;
};

RnnStepsFn rnn_steps_baseline();
// null when the library was built without them (not x86-64)
RnnStepsFn rnn_steps_avx2();
RnnStepsFn rnn_steps_avx512();

}  // namespace pt2rt::kernels
