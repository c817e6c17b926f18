// pt2rt::rnn_layer and pt2rt::lstm_layer: the recurrence of a GRU, plain RNN or LSTM layer (torch.nn.GRU, RNN, LSTM)
// as one kernel call, which the exporter puts where inductor would unroll it into a product per step, or call
// oneDNN's RNN primitive per layer and direction (export_tools/recurrent.py). The
// layer's input projection for every step stays in the graph, one matrix product that inductor compiles (and packs
// where it packs products); the recurrence runs in rnn_impl.h, the directions of a bidirectional layer on threads of
// their own when the intra-op thread count allows, a single direction's steps split across them.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "isa.h"
#include "rnn_kernel.h"

namespace {

using pt2rt::kernels::RnnMode;
using pt2rt::kernels::RnnStepsFn;

// The best recurrence this CPU runs, chosen once (isa.h).
RnnStepsFn steps_fn() {
  static const RnnStepsFn fn = pt2rt::kernels::widest_isa(
      pt2rt::kernels::rnn_steps_baseline(), pt2rt::kernels::rnn_steps_avx2(), pt2rt::kernels::rnn_steps_avx512());
  return fn;
}

// MKL's packed products (inside libtorch on x86-64), where MKL runs its AVX2 or AVX-512 code: from 2 rows on they
// beat the kernel's own product (on an AVX2 AMD EPYC, 8 rows of an LSTM of 256: ~90 GFLOP/s against ~63). Looked
// up by name: a libtorch without MKL (aarch64) has none of them, and the kernel's own product runs.
// $PT2RT_RNN_PRODUCT: "own" the kernel's product always, "mkl" MKL's for every layer whatever code MKL runs (the
// tests compare the two), unset: MKL's where it gains.
struct Mkl {
  size_t (*pack_get_size)(int identifier, int m, int n, int k);
  void (*pack)(int layout, int identifier, int trans, int m, int n, int k, float alpha, const float* src, int ld,
               float* dest);
  void (*compute)(int layout, int transa, int transb, int m, int n, int k, const float* a, int lda, const float* b,
                  int ldb, float beta, float* c, int ldc);
  int (*set_num_threads_local)(int threads);
  bool fast;  // MKL runs its AVX2 or AVX-512 code
};
enum : int { kRowMajor = 101, kNoTrans = 111, kPacked = 151, kBMatrix = 162 };  // mkl_cblas.h
constexpr int kMklAvx2Branch = 10;                                                 // MKL_CBWR_AVX2 (mkl_cbwr.h)
constexpr int64_t kMklRowsFrom = 2, kMklStepsFrom = 4;  // fewer steps do not pay for packing W_hh
constexpr int64_t kMklGates = 512;  // per packed product

enum class ProductChoice { Auto, Own, Mkl };

ProductChoice product_choice() {
  static const ProductChoice choice = [] {
    const char* env = std::getenv("PT2RT_RNN_PRODUCT");
    const std::string v = env != nullptr ? env : "";
    if (v.empty()) return ProductChoice::Auto;
    if (v == "own") return ProductChoice::Own;
    if (v == "mkl") return ProductChoice::Mkl;
    TORCH_CHECK(false, "PT2RT_RNN_PRODUCT must be own or mkl (or unset), got '", v, "'");
  }();
  return choice;
}

const Mkl* mkl() {
  static const Mkl* found = []() -> const Mkl* {
    void* torch = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
    if (torch == nullptr) return nullptr;
    static Mkl m;
    m.pack_get_size = reinterpret_cast<decltype(m.pack_get_size)>(dlsym(torch, "cblas_sgemm_pack_get_size"));
    m.pack = reinterpret_cast<decltype(m.pack)>(dlsym(torch, "cblas_sgemm_pack"));
    m.compute = reinterpret_cast<decltype(m.compute)>(dlsym(torch, "cblas_sgemm_compute"));
    m.set_num_threads_local = reinterpret_cast<decltype(m.set_num_threads_local)>(
        dlsym(torch, "MKL_Set_Num_Threads_Local"));
    auto* branch = reinterpret_cast<int (*)()>(dlsym(torch, "mkl_serv_cbwr_get_auto_branch"));
    const bool usable = m.pack_get_size && m.pack && m.compute && m.set_num_threads_local;
    m.fast = usable && branch != nullptr && branch() >= kMklAvx2Branch;
    dlclose(torch);  // libtorch_cpu stays loaded: this library links it
    return usable ? &m : nullptr;
  }();
  return found;
}

// MKL for a layer of B rows and T steps, or null: the kernel's own product.
const Mkl* mkl_for(int64_t B, int64_t T, const char* op) {
  switch (product_choice()) {
    case ProductChoice::Own: return nullptr;
    case ProductChoice::Mkl:
      TORCH_CHECK(mkl() != nullptr, op, ": PT2RT_RNN_PRODUCT=mkl, but this libtorch has no MKL");
      return mkl();
    case ProductChoice::Auto: break;
  }
  const Mkl* m = mkl();
  return m != nullptr && m->fast && B >= kMklRowsFrom && T >= kMklStepsFrom ? m : nullptr;
}

// One direction's recurrent product through MKL, kMklGates gates per product (every gate of kMklGates / gates
// units): each group's W_hh columns packed once (at the first step of the piece it belongs to) and multiplied by
// every step after. A step splits at whole groups, so every value is computed by the same product on any number of
// threads; a piece updates its units' states right after (one hand-off a step). (Narrower products cost MKL more
// per gate: 128 gates at a time, 8 rows of an LSTM of 256 took 59 us a step against 46 us at once.)
struct MklProduct {
  const Mkl* m;
  int64_t B, H, gates;
  const float *whh, *bhh;
  std::vector<std::unique_ptr<pt2rt::kernels::AlignedFloats>> packed;  // per group (not zeroed: MKL writes all)
  std::vector<std::unique_ptr<float[]>> bias;

  // about kMklGates gates per group, groups of equal units but the last (a multiple of 16) so that pieces balance
  static int64_t units_per_group(int64_t H, int64_t gates) {
    const int64_t groups = std::max<int64_t>((gates * H + kMklGates - 1) / kMklGates, 1);
    return std::max<int64_t>(((H + groups - 1) / groups + 15) / 16 * 16, 16);
  }

  static void run(void* ctx, int64_t u0, const float* h, int64_t h_b, float* g) {
    auto& self = *static_cast<MklProduct*>(ctx);
    constexpr int64_t panel = pt2rt::kernels::kPanel;
    const int64_t per = units_per_group(self.H, self.gates), n = std::min(per, self.H - u0), N = self.gates * n;
    const size_t group = static_cast<size_t>(u0 / per);
    // one thread for the packing and the product: MKL's own threads would oversubscribe a split step, and MKL packs
    // by the thread count it will use (another count, other sums: the bits would follow the intra-op threads)
    const int threads = self.m->set_num_threads_local(1);
    auto& packed = self.packed[group];
    if (!packed) {
      // the group's columns side by side, gate after gate: H x N, row-major (the B matrix, K x N); b_hh the same
      std::unique_ptr<float[]> plain(new float[static_cast<size_t>(self.H * N)]);
      self.bias[group].reset(new float[static_cast<size_t>(N)]);
      for (int64_t k = 0; k < self.gates; ++k) {
        std::memcpy(self.bias[group].get() + k * n, self.bhh + k * self.H + u0, sizeof(float) * n);
        // the gate's columns c0 .. c0 + n of W_hh^T, row by row, a panel's run at a time
        for (int64_t i = 0, c = k * self.H + u0; i < n;) {
          const int64_t run = std::min(n - i, panel - c % panel);
          const float* src = self.whh + (c / panel) * self.H * panel + c % panel;
          for (int64_t r = 0; r < self.H; ++r) {
            std::memcpy(plain.get() + r * N + k * n + i, src + r * panel, sizeof(float) * run);
          }
          i += run;
          c += run;
        }
      }
      const int b = static_cast<int>(self.B), k = static_cast<int>(self.H), cols = static_cast<int>(N);
      packed = std::make_unique<pt2rt::kernels::AlignedFloats>(
          static_cast<int64_t>(self.m->pack_get_size(kBMatrix, b, cols, k) / sizeof(float) + 1));
      self.m->pack(kRowMajor, kBMatrix, kNoTrans, b, cols, k, 1.0f, plain.get(), cols, packed->data());
    }
    for (int64_t b = 0; b < self.B; ++b) std::memcpy(g + b * N, self.bias[group].get(), sizeof(float) * N);
    self.m->compute(kRowMajor, kNoTrans, kPacked, static_cast<int>(self.B), static_cast<int>(N),
                    static_cast<int>(self.H), h, static_cast<int>(h_b), packed->data(), static_cast<int>(N), 1.0f, g,
                    static_cast<int>(N));
    self.m->set_num_threads_local(threads);
  }
};

// The members of a layer's steps on ATen's intra-op threads (rnn_kernel.h: RnnParallelFn).
void aten_parallel(int64_t parts, void* ctx, void (*member)(void* ctx, int64_t p0, int64_t p1)) {
  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) { member(ctx, p0, p1); });
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
  const int64_t Gp = pt2rt::kernels::padded_gates(s.G);
  // MKL takes int sizes and strides: a state row's stride in out (out_b) past them keeps the kernel's product
  const bool ints = std::max({out_b, s.B, s.H * Gp}) <= std::numeric_limits<int>::max();
  const Mkl* m = ints ? mkl_for(s.B, s.T, op_name(mode)) : nullptr;
  at::parallel_for(0, s.D, 1, [&](int64_t d0, int64_t d1) {
    const pt2rt::kernels::AlignedFloats scratch(s.B * (Gp + s.H));
    for (int64_t d = d0; d < d1; ++d) {
      const int64_t gates = mode == RnnMode::Gru ? 3 : mode == RnnMode::Lstm ? 4 : 1;
      const int64_t per = MklProduct::units_per_group(s.H, gates);
      const size_t groups = static_cast<size_t>((s.H + per - 1) / per);
      MklProduct product{m, s.B, s.H, gates, whh_t[d].data_ptr<float>(), bhh[d].data_ptr<float>(),
                         std::vector<std::unique_ptr<pt2rt::kernels::AlignedFloats>>(groups),
                         std::vector<std::unique_ptr<float[]>>(groups)};
      const pt2rt::kernels::RnnProduct by_mkl{&product, &MklProduct::run, per};
      steps(mode, s.T, s.B, s.H, gi.data_ptr<float>() + d * s.G, gi_t, gi_b, whh_t[d].data_ptr<float>(),
            bhh[d].data_ptr<float>(), h0[d].data_ptr<float>(), c0_in ? c0[d].data_ptr<float>() : nullptr,
            out.data_ptr<float>() + d * s.H, out_t, out_b, d == 1, hn[d].data_ptr<float>(),
            c0_in ? cn[d].data_ptr<float>() : nullptr, scratch.data(), &aten_parallel, parts,
            m != nullptr ? &by_mkl : nullptr);
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
