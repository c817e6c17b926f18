// pt2rt::rnn_layer and pt2rt::lstm_layer: the recurrence of a GRU, plain RNN or LSTM layer (torch.nn.GRU, RNN, LSTM)
// as one kernel call, which the exporter puts where inductor would unroll it into a product per step, or call
// oneDNN's RNN primitive per layer and direction (export_tools/recurrent.py). The
// layer's input projection for every step stays in the graph, one matrix product that inductor compiles (and packs
// where it packs products); the recurrence runs in rnn_impl.h, the directions of a bidirectional layer on threads of
// their own when the intra-op thread count allows, a single direction's steps split across them.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "rnn_kernel.h"

namespace {

using pt2rt::kernels::RnnMode;
using pt2rt::kernels::RnnStepsFn;

// The best recurrence this CPU runs, chosen once; ATEN_CPU_CAPABILITY (torch's switch: default, avx2, avx512) caps it.
RnnStepsFn steps_fn() {
  static const RnnStepsFn fn = [] {
    const char* env = std::getenv("ATEN_CPU_CAPABILITY");
    const std::string cap = env != nullptr ? env : "";
    if (cap == "default") return pt2rt::kernels::rnn_steps_baseline();
#if defined(__x86_64__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (avx512 && cap != "avx2" && pt2rt::kernels::rnn_steps_avx512()) return pt2rt::kernels::rnn_steps_avx512();
    if (avx2 && pt2rt::kernels::rnn_steps_avx2()) return pt2rt::kernels::rnn_steps_avx2();
#endif
    return pt2rt::kernels::rnn_steps_baseline();
  }();
  return fn;
}

// The pieces of a step on ATen's intra-op threads (rnn_kernel.h: RnnParallelFn).
void aten_parallel(int64_t parts, void* ctx, void (*piece)(void* ctx, int64_t part)) {
  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) piece(ctx, p);
  });
}

RnnMode parse_mode(const std::string& mode) {
  if (mode == "gru") return RnnMode::Gru;
  if (mode == "rnn_tanh") return RnnMode::Tanh;
  if (mode == "rnn_relu") return RnnMode::Relu;
  TORCH_CHECK(false, "pt2rt::rnn_layer: mode must be gru, rnn_tanh or rnn_relu, got '", mode, "'");
}

const char* op_name(RnnMode mode) { return mode == RnnMode::Lstm ? "pt2rt::lstm_layer" : "pt2rt::rnn_layer"; }

struct Shapes {
  int64_t T, B, H, D, G;
};

// gi: [T, B, D * G] (batch_first: [B, T, D * G]), the input gates of every step, direction after direction;
// h0 (and an LSTM's c0): [D, B, H]; per direction W_hh packed in panels [G_p / kPanel, H, kPanel] and b_hh [G_p]
// (G_p = padded_gates(G); rnn_kernel.h).
Shapes check(const at::Tensor& gi, const at::Tensor& h0, const at::Tensor* c0, at::TensorList whh_t,
             at::TensorList bhh, RnnMode mode, bool batch_first) {
  const char* op = op_name(mode);
  const auto D = static_cast<int64_t>(whh_t.size());
  TORCH_CHECK((D == 1 || D == 2) && bhh.size() == whh_t.size(), op,
              ": expected 1 or 2 directions, a W_hh^T and a b_hh each; got ", whh_t.size(), " and ", bhh.size());
  TORCH_CHECK(gi.dim() == 3 && h0.dim() == 3 && h0.size(0) == D, op, ": expected gi [T, B, D*G] and h0 [D, B, H], got ",
              gi.sizes(), " and ", h0.sizes());
  const int64_t T = gi.size(batch_first ? 1 : 0), B = gi.size(batch_first ? 0 : 1), H = h0.size(2);
  const int64_t G = mode == RnnMode::Gru ? 3 * H : mode == RnnMode::Lstm ? 4 * H : H;
  TORCH_CHECK(h0.size(1) == B && gi.size(2) == D * G, op, ": gi ", gi.sizes(), " and h0 ", h0.sizes(),
              " do not agree (expected ", D * G, " gates per row and ", B, " rows)");
  TORCH_CHECK(c0 == nullptr || c0->sizes() == h0.sizes(), op, ": expected c0 shaped like h0 ", h0.sizes(), ", got ",
              c0 ? c0->sizes() : at::IntArrayRef{});
  const int64_t Gp = pt2rt::kernels::padded_gates(G), panel = pt2rt::kernels::kPanel;
  for (int64_t d = 0; d < D; ++d) {
    TORCH_CHECK(whh_t[d].sizes() == at::IntArrayRef({Gp / panel, H, panel}) && bhh[d].sizes() == at::IntArrayRef({Gp}),
                op, ": direction ", d, ": expected W_hh packed [", Gp / panel, ", ", H, ", ", panel, "] and b_hh [",
                Gp, "], got ", whh_t[d].sizes(), " and ", bhh[d].sizes());
  }
  return {T, B, H, D, G};
}

std::vector<int64_t> out_shape(const Shapes& s, bool batch_first) {
  return batch_first ? std::vector<int64_t>{s.B, s.T, s.D * s.H} : std::vector<int64_t>{s.T, s.B, s.D * s.H};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> run_layer(const at::Tensor& gi_in, const at::Tensor& h0_in,
                                                         const at::Tensor* c0_in, at::TensorList whh_t_in,
                                                         at::TensorList bhh_in, RnnMode mode, bool batch_first) {
  const Shapes s = check(gi_in, h0_in, c0_in, whh_t_in, bhh_in, mode, batch_first);
  TORCH_CHECK(gi_in.scalar_type() == at::kFloat && h0_in.scalar_type() == at::kFloat &&
                  (c0_in == nullptr || c0_in->scalar_type() == at::kFloat),
              op_name(mode), ": expected float32 gates and states, got ", gi_in.scalar_type(), " and ",
              h0_in.scalar_type());
  if (s.T == 0 || s.B == 0) {  // no step to take: the states come back as they went in
    return {at::empty(out_shape(s, batch_first), gi_in.options()), h0_in.clone(at::MemoryFormat::Contiguous),
            c0_in ? c0_in->clone(at::MemoryFormat::Contiguous) : at::Tensor()};
  }
  const RnnStepsFn steps = steps_fn();
  const at::Tensor gi = gi_in.contiguous(), h0 = h0_in.contiguous();
  const at::Tensor c0 = c0_in ? c0_in->contiguous() : at::Tensor();
  std::vector<at::Tensor> whh_t, bhh;
  for (int64_t d = 0; d < s.D; ++d) {
    whh_t.push_back(whh_t_in[d].to(at::kFloat).contiguous());
    bhh.push_back(bhh_in[d].to(at::kFloat).contiguous());
  }
  at::Tensor out = at::empty(out_shape(s, batch_first), gi.options());
  at::Tensor hn = at::empty({s.D, s.B, s.H}, gi.options());
  at::Tensor cn = c0_in ? at::empty({s.D, s.B, s.H}, gi.options()) : at::Tensor();
  // a (t, b) row's offset in gi and out: time-major or batch-first
  const int64_t gi_t = batch_first ? s.D * s.G : s.B * s.D * s.G, gi_b = batch_first ? s.T * s.D * s.G : s.D * s.G;
  const int64_t out_t = batch_first ? s.D * s.H : s.B * s.D * s.H, out_b = batch_first ? s.T * s.D * s.H : s.D * s.H;
  // the directions at once where there are threads for them (each step waits for the one before); one direction
  // (or more threads than directions were not given to them: at::parallel_for does not nest) splits its steps
  const int64_t parts = s.D == 1 && !at::in_parallel_region() ? at::get_num_threads() : 1;
  at::parallel_for(0, s.D, 1, [&](int64_t d0, int64_t d1) {
    std::vector<float> scratch(static_cast<size_t>(s.B * (pt2rt::kernels::padded_gates(s.G) + s.H)));
    for (int64_t d = d0; d < d1; ++d) {
      steps(mode, s.T, s.B, s.H, gi.data_ptr<float>() + d * s.G, gi_t, gi_b, whh_t[d].data_ptr<float>(),
            bhh[d].data_ptr<float>(), h0[d].data_ptr<float>(), c0_in ? c0[d].data_ptr<float>() : nullptr,
            out.data_ptr<float>() + d * s.H, out_t, out_b, d == 1, hn[d].data_ptr<float>(),
            c0_in ? cn[d].data_ptr<float>() : nullptr, scratch.data(), &aten_parallel, parts);
    }
  });
  return {out, hn, cn};
}

std::tuple<at::Tensor, at::Tensor> rnn_layer_cpu(const at::Tensor& gi, const at::Tensor& h0, at::TensorList whh_t,
                                                 at::TensorList bhh, std::string mode, bool batch_first) {
  auto [out, hn, cn] = run_layer(gi, h0, nullptr, whh_t, bhh, parse_mode(mode), batch_first);
  return {out, hn};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_layer_cpu(const at::Tensor& gi, const at::Tensor& h0,
                                                              const at::Tensor& c0, at::TensorList whh_t,
                                                              at::TensorList bhh, bool batch_first) {
  return run_layer(gi, h0, &c0, whh_t, bhh, RnnMode::Lstm, batch_first);
}

}  // namespace

// The shapes for tracing (fake tensors, symbolic batch and steps) are export_tools.recurrent's register_fake.
TORCH_LIBRARY(pt2rt, m) {
  m.def("rnn_layer(Tensor gi, Tensor h0, Tensor[] whh_t, Tensor[] bhh, str mode, bool batch_first) -> "
        "(Tensor, Tensor)");
  m.def("lstm_layer(Tensor gi, Tensor h0, Tensor c0, Tensor[] whh_t, Tensor[] bhh, bool batch_first) -> "
        "(Tensor, Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(pt2rt, CPU, m) {
  m.impl("rnn_layer", &rnn_layer_cpu);
  m.impl("lstm_layer", &lstm_layer_cpu);
}
