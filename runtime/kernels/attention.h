// Scaled dot-product attention of one head (libpt2rt_kernels.so's pt2rt::attention): softmax(q k^T * scale) v
// without a mask or dropout, what torch.nn.functional.scaled_dot_product_attention computes in inference. Pure float
// code without torch headers, compiled once per ISA and chosen at run time.
#pragma once

#include <cstdint>

namespace pt2rt::kernels {

// One head: q [lq, d], k [lk, d], v [lk, dv], out [lq, dv], each row contiguous, rows *_rs floats apart. The kernel
// computes out's rows [r0, r1); scratch (attention_scratch_floats) holds k^T, packed by the call unless `packed` (an
// earlier call of the same head on this scratch did). Each output row is
// computed the same way whatever rows a call gets: the scores row by row in key order, e^(s - max) with the kernels'
// e^x, the sum of p_j v_j in key order, divided by the sum of the p_j at the end. As eager: a row with a NaN or a +inf
// score is NaN, a row of -inf scores only is 0 (NaN where it meets an inf or NaN value), a key more than 86 below the
// row's largest score weighs 0; no keys (lk = 0) gives zeros.
struct AttentionHead {
  const float *q, *k, *v;
  float* out;
  int64_t q_rs, k_rs, v_rs, out_rs;
  int64_t lq, lk, d, dv;
  float scale;
};
using AttentionKernel = void (*)(const AttentionHead& head, int64_t r0, int64_t r1, float* scratch, bool packed);

// the keys' count rounded up to whole vectors of the widest build
constexpr int64_t kAttentionKeyAlign = 16;
inline int64_t attention_padded_keys(int64_t lk) {
  return (lk + kAttentionKeyAlign - 1) / kAttentionKeyAlign * kAttentionKeyAlign;
}
// rows a call computes together (a multiple of every build's blocks): calls that split a head at multiples of it
// compute every row as one call for the whole head would
constexpr int64_t kAttentionRowBlock = 6;
inline int64_t attention_scratch_floats(int64_t lk, int64_t d) {
  return attention_padded_keys(lk) * (d + kAttentionRowBlock);
}

AttentionKernel attention_baseline();
// null when the library was built without them (not x86-64)
AttentionKernel attention_avx2();
AttentionKernel attention_avx512();

}  // namespace pt2rt::kernels
