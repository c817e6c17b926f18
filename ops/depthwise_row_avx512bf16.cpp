// The AVX-512 kernels once more with AVX512-BF16 (CMake adds -mavx512bf16 to this file): bfloat16 outputs are
// rounded by vcvtneps2bf16, one instruction instead of six. It rounds to nearest even like c10::BFloat16 but
// treats float32 denormals as zero (below 1.2e-38, far inside any bfloat16 tolerance).
#include "depthwise_row_kernel.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__FMA__) && defined(__AVX512BF16__)
#include "depthwise_plane_impl.h"
#include "depthwise_row_impl.h"
bool my_ops::row_kernels_avx512_bf16(RowKernels* out) {
  *out = kernels();
  out->plane_f32 = &plane_rows<float>;
  out->plane_bf16 = &plane_rows<uint16_t>;
  return true;
}
#else
bool my_ops::row_kernels_avx512_bf16(RowKernels*) { return false; }
#endif
