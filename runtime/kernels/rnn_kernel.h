// The recurrence of GRU and plain RNN layers (libpt2rt_kernels.so): pure float code without torch headers,
// compiled once per ISA (rnn_<isa>.cpp) and chosen once at run time (rnn.cpp).
#pragma once

#include <cstdint>

namespace pt2rt::kernels {

enum class RnnMode : int { Gru = 0, Tanh = 1, Relu = 2 };

// One direction of one layer over T steps for a batch of B rows, PyTorch's formulas (torch.nn.GRU, torch.nn.RNN):
//   gi: the input gates x_t W_ih^T + b_ih of step t, row b at gi + t * gi_t + b * gi_b (G floats: r, z, n for a
//       GRU, G = 3H; H for an RNN)
//   whh_t: H x G, W_hh transposed (row k: what h[k] adds to each gate); bhh: G
//   h0: B x H; the state after step t goes to out + t * out_t + b * out_b (H floats), the last one to hn (B x H)
//   reverse: steps T-1 .. 0; scratch: B x G floats
using RnnStepsFn = void (*)(RnnMode mode, int64_t T, int64_t B, int64_t H, const float* gi, int64_t gi_t,
                            int64_t gi_b, const float* whh_t, const float* bhh, const float* h0, float* out,
                            int64_t out_t, int64_t out_b, bool reverse, float* hn, float* scratch);

RnnStepsFn rnn_steps_baseline();
// null when the library was built without them (not x86-64)
RnnStepsFn rnn_steps_avx2();
RnnStepsFn rnn_steps_avx512();

}  // namespace pt2rt::kernels
