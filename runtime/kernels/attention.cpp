// pt2rt::attention: scaled dot-product attention without a mask or dropout (attention.h), each head's k^T packed once
// per thread and its rows in blocks: ATen's flash attention for CPU runs its small products through MKL's generic
// sgemm with a copy of the operands per block.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "attention.h"
#include "isa.h"

namespace {

using pt2rt::kernels::AttentionHead;
using pt2rt::kernels::AttentionKernel;

AttentionKernel kernel_fn() {
  static const AttentionKernel fn = pt2rt::kernels::widest_isa(
      pt2rt::kernels::attention_baseline(), pt2rt::kernels::attention_avx2(), pt2rt::kernels::attention_avx512());
  return fn;
}

// multiply-adds per parallel piece (a hand-off costs a few us)
constexpr int64_t kWorkPerPiece = int64_t{1} << 17;

at::Tensor attention_cpu(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, double scale) {
  constexpr const char* op = "pt2rt::attention";
  TORCH_CHECK(q_in.scalar_type() == at::kFloat && k_in.scalar_type() == at::kFloat && v_in.scalar_type() == at::kFloat,
              op, ": expected float32 q, k and v, got ", q_in.scalar_type(), ", ", k_in.scalar_type(), " and ",
              v_in.scalar_type());
  TORCH_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, op,
              ": expected q [B, H, L_q, D], k [B, H, L_k, D] and v [B, H, L_k, D_v], got ", q_in.sizes(), ", ",
              k_in.sizes(), " and ", v_in.sizes());
  const int64_t B = q_in.size(0), H = q_in.size(1), lq = q_in.size(2), d = q_in.size(3);
  const int64_t lk = k_in.size(2), dv = v_in.size(3);
  TORCH_CHECK(k_in.size(0) == B && k_in.size(1) == H && k_in.size(3) == d && v_in.size(0) == B && v_in.size(1) == H &&
                  v_in.size(2) == lk,
              op, ": q ", q_in.sizes(), ", k ", k_in.sizes(), " and v ", v_in.sizes(),
              " do not agree (expected k [B, H, L_k, D] and v [B, H, L_k, D_v] for q [B, H, L_q, D])");
  // rows may lie anywhere (a head's q, k and v are views of one projection's output); each row contiguous
  const auto rows_contiguous = [](const at::Tensor& t) { return t.size(3) <= 1 || t.stride(3) == 1 ? t : t.contiguous(); };
  const at::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  // [B, L_q, H, D_v] in memory, as the heads go on into the projection after them (a transpose and a view)
  at::Tensor out = at::empty({B, lq, H, dv}, q.options()).transpose(1, 2);
  if (out.numel() == 0) return out;
  const AttentionKernel kernel = kernel_fn();
  const int64_t heads = B * H;
  // pieces of whole row blocks (every row computed as at one thread), ~kWorkPerPiece multiply-adds each
  const int64_t per_row = std::max<int64_t>(1, lk * (d + dv));
  const int64_t block = pt2rt::kernels::kAttentionRowBlock;
  const int64_t rows = std::max<int64_t>(1, (kWorkPerPiece / per_row + block - 1) / block) * block;
  const int64_t pieces_per_head = (lq + rows - 1) / rows;
  const auto head_at = [&](int64_t i) {
    const int64_t b = i / H, h = i % H;
    return AttentionHead{q.data_ptr<float>() + b * q.stride(0) + h * q.stride(1),
                         k.data_ptr<float>() + b * k.stride(0) + h * k.stride(1),
                         v.data_ptr<float>() + b * v.stride(0) + h * v.stride(1),
                         out.data_ptr<float>() + b * out.stride(0) + h * out.stride(1),
                         q.stride(2), k.stride(2), v.stride(2), out.stride(2), lq, lk, d, dv, static_cast<float>(scale)};
  };
  // a call too small to gain from threads stays on this one
  const int64_t pieces = heads * pieces_per_head;
  const int64_t grain = heads * lq * per_row < 2 * kWorkPerPiece ? pieces : 1;
  at::parallel_for(0, pieces, grain, [&](int64_t p0, int64_t p1) {
    std::vector<float> scratch(static_cast<size_t>(pt2rt::kernels::attention_scratch_floats(lk, d)));
    int64_t packed = -1;  // the head whose k^T scratch holds
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t i = p / pieces_per_head, r0 = p % pieces_per_head * rows;
      kernel(head_at(i), r0, std::min(lq, r0 + rows), scratch.data(), packed == i);
      packed = i;
    }
  });
  return out;
}

}  // namespace

// The shape for tracing (a fake tensor) is export_tools' register_fake.
TORCH_LIBRARY_FRAGMENT(pt2rt, m) { m.def("attention(Tensor q, Tensor k, Tensor v, float scale) -> Tensor"); }
TORCH_LIBRARY_IMPL(pt2rt, CPU, m) { m.impl("attention", &attention_cpu); }
