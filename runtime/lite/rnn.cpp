// pt2rt::rnn_layer and pt2rt::lstm_layer in lite: the same recurrence as libpt2rt_kernels.so's
// (runtime/kernels/rnn_<isa>.cpp, chosen by cpuid), on shim tensors; the shapes as runtime/kernels/rnn.cpp takes
// them.
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../kernels/rnn_kernel.h"
#include "guard.h"
#include "kernels.h"
#include "tensor.h"

using namespace pt2rt::lite;
using pt2rt::kernels::RnnMode;
using pt2rt::kernels::RnnStepsFn;

namespace {

// The members of a layer's steps on this runtime's OpenMP threads (rnn_kernel.h: RnnParallelFn).
void omp_parallel(int64_t parts, void* ctx, void (*member)(void* ctx, int64_t p0, int64_t p1)) {
#pragma omp parallel num_threads(static_cast<int>(parts))
  {
    const int64_t n = omp_get_num_threads(), i = omp_get_thread_num();
    const int64_t p0 = parts * i / n, p1 = parts * (i + 1) / n;
    if (p0 < p1) member(ctx, p0, p1);
  }
}

// The recurrence of the instruction set lite's other kernels run (kernels.h: cpuid, narrowed by PT2RT_LITE_KERNELS)
RnnStepsFn steps_fn() {
  static const RnnStepsFn fn = [] {
    const std::string set = kernels().name;
#if defined(__x86_64__)  // the AVX files are x86-64's alone (CMakeLists.txt)
    if (set == "avx512" && pt2rt::kernels::rnn_steps_avx512()) return pt2rt::kernels::rnn_steps_avx512();
    if ((set == "avx512" || set == "avx2") && pt2rt::kernels::rnn_steps_avx2()) return pt2rt::kernels::rnn_steps_avx2();
#endif
    return pt2rt::kernels::rnn_steps_baseline();
  }();
  return fn;
}

// A contiguous float32 copy of t's elements (t itself where it is contiguous already: no copy kept)
struct Dense {
  std::unique_ptr<ShimTensor> copy;
  const float* data = nullptr;
};

Dense dense(const ShimTensor& t, const char* what) {
  if (t.dtype != kFloat32) throw std::invalid_argument(std::string(what) + " is not float32");
  Dense d;
  if (t.is_contiguous()) {
    d.data = static_cast<const float*>(t.data());
    return d;
  }
  d.copy = empty_strided(t.sizes, contiguous_strides(t.sizes), kFloat32);
  copy_strided(*d.copy, t);
  d.data = static_cast<const float*>(d.copy->data());
  return d;
}

void run_layer(RnnMode mode, const ShimTensor& gi_t, const ShimTensor& h0_t, const ShimTensor* c0_t,
               const AtenTensorHandle* whh_h, int64_t nw, const AtenTensorHandle* bhh_h, int64_t nb, bool batch_first,
               AtenTensorHandle* ret_out, AtenTensorHandle* ret_hn, AtenTensorHandle* ret_cn) {
  const char* op = mode == RnnMode::Lstm ? "pt2rt::lstm_layer" : "pt2rt::rnn_layer";
  const int64_t D = nw;
  if ((D != 1 && D != 2) || nb != nw)
    throw std::invalid_argument(std::string(op) + ": expected 1 or 2 directions, a W_hh^T and a b_hh each");
  if (gi_t.dim() != 3 || h0_t.dim() != 3 || h0_t.sizes[0] != D)
    throw std::invalid_argument(std::string(op) + ": expected gi [T, B, D*G] and h0 [D, B, H]");
  const int64_t T = gi_t.sizes[batch_first ? 1 : 0], B = gi_t.sizes[batch_first ? 0 : 1], H = h0_t.sizes[2];
  const int64_t G = mode == RnnMode::Gru ? 3 * H : mode == RnnMode::Lstm ? 4 * H : H;
  if (h0_t.sizes[1] != B || gi_t.sizes[2] != D * G)
    throw std::invalid_argument(std::string(op) + ": gi and h0 do not agree");
  if (c0_t != nullptr && c0_t->sizes != h0_t.sizes) throw std::invalid_argument(std::string(op) + ": c0 is not shaped like h0");
  const int64_t Gp = pt2rt::kernels::padded_gates(G), panel = pt2rt::kernels::kPanel;
  std::vector<Dense> whh, bhh;
  for (int64_t d = 0; d < D; ++d) {
    const ShimTensor& w = *as_tensor(whh_h[d]);
    const ShimTensor& b = *as_tensor(bhh_h[d]);
    if (w.sizes != std::vector<int64_t>{Gp / panel, H, panel} || b.sizes != std::vector<int64_t>{Gp})
      throw std::invalid_argument(std::string(op) + ": direction " + std::to_string(d) +
                                  ": W_hh or b_hh is not packed as the exporter packs them");
    whh.push_back(dense(w, "W_hh"));
    bhh.push_back(dense(b, "b_hh"));
  }
  const std::vector<int64_t> out_sizes = batch_first ? std::vector<int64_t>{B, T, D * H}
                                                     : std::vector<int64_t>{T, B, D * H};
  auto out = empty_strided(out_sizes, contiguous_strides(out_sizes), kFloat32);
  auto hn = empty_strided({D, B, H}, contiguous_strides({D, B, H}), kFloat32);
  auto cn = empty_strided(c0_t ? std::vector<int64_t>{D, B, H} : std::vector<int64_t>{0},
                          c0_t ? contiguous_strides({D, B, H}) : std::vector<int64_t>{1}, kFloat32);
  const Dense h0 = dense(h0_t, "h0");
  const Dense c0 = c0_t ? dense(*c0_t, "c0") : Dense{};
  if (T == 0 || B == 0) {  // no step to take: the states come back as they went in
    std::memcpy(hn->data(), h0.data, static_cast<std::size_t>(D * B * H) * sizeof(float));
    if (c0_t) std::memcpy(cn->data(), c0.data, static_cast<std::size_t>(D * B * H) * sizeof(float));
  } else {
    const Dense gi = dense(gi_t, "gi");
    const RnnStepsFn steps = steps_fn();
    const int64_t gi_s = batch_first ? D * G : B * D * G, gi_b = batch_first ? T * D * G : D * G;
    const int64_t out_s = batch_first ? D * H : B * D * H, out_b = batch_first ? T * D * H : D * H;
    float* o = static_cast<float*>(out->data());
    float* h = static_cast<float*>(hn->data());
    float* c = static_cast<float*>(cn->data());
    // the directions at once where there are threads for them (each step waits for the one before); one direction
    // splits its steps across them
    const int64_t parts = D == 1 && !omp_in_parallel() ? omp_get_max_threads() : 1;
#pragma omp parallel for schedule(static) if (D > 1)
    for (int64_t d = 0; d < D; ++d) {
      const pt2rt::kernels::AlignedFloats scratch(B * (Gp + H));
      steps(mode, T, B, H, gi.data + d * G, gi_s, gi_b, whh[d].data, bhh[d].data, h0.data + d * B * H,
            c0_t ? c0.data + d * B * H : nullptr, o + d * H, out_s, out_b, d == 1, h + d * B * H,
            c0_t ? c + d * B * H : nullptr, scratch.data(), &omp_parallel, parts, nullptr);
    }
  }
  *ret_out = as_handle(out.release());
  *ret_hn = as_handle(hn.release());
  if (ret_cn != nullptr) *ret_cn = as_handle(cn.release());
}

}  // namespace

AOTITorchError pt2rt_lite_aoti_torch_cpu_rnn_layer(AtenTensorHandle gi, AtenTensorHandle h0,
                                                   const AtenTensorHandle* whh_t, int64_t whh_t_len,
                                                   const AtenTensorHandle* bhh, int64_t bhh_len, const char* mode,
                                                   int32_t batch_first, AtenTensorHandle* ret0,
                                                   AtenTensorHandle* ret1) {
  return guarded("pt2rt::rnn_layer", [&] {
    const std::string m = mode != nullptr ? mode : "";
    const RnnMode kind = m == "gru" ? RnnMode::Gru : m == "rnn_tanh" ? RnnMode::Tanh : m == "rnn_relu" ? RnnMode::Relu
                                                                                                       : RnnMode::Lstm;
    if (kind == RnnMode::Lstm) throw std::invalid_argument("mode must be gru, rnn_tanh or rnn_relu, got '" + m + "'");
    run_layer(kind, *as_tensor(gi), *as_tensor(h0), nullptr, whh_t, whh_t_len, bhh, bhh_len, batch_first != 0, ret0,
              ret1, nullptr);
  });
}

AOTITorchError pt2rt_lite_aoti_torch_cpu_lstm_layer(AtenTensorHandle gi, AtenTensorHandle h0, AtenTensorHandle c0,
                                                    const AtenTensorHandle* whh_t, int64_t whh_t_len,
                                                    const AtenTensorHandle* bhh, int64_t bhh_len, int32_t batch_first,
                                                    AtenTensorHandle* ret0, AtenTensorHandle* ret1,
                                                    AtenTensorHandle* ret2) {
  return guarded("pt2rt::lstm_layer", [&] {
    run_layer(RnnMode::Lstm, *as_tensor(gi), *as_tensor(h0), as_tensor(c0), whh_t, whh_t_len, bhh, bhh_len,
              batch_first != 0, ret0, ret1, ret2);
  });
}
