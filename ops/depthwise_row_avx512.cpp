// The row kernels compiled for AVX-512 F/DQ/VL/BW + FMA, the x86-64-v4 level (CMake adds the flags to this file
// only): 16-float vectors and 32 registers; float32 and bfloat16 planes read in place.
#include "depthwise_row_kernel.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && defined(__FMA__)
#include "depthwise_plane_impl.h"
#include "depthwise_row_impl.h"
bool my_ops::row_kernels_avx512(RowKernels* out) {
  *out = kernels();
  out->plane_f32 = &plane_rows<float>;
  out->plane_bf16 = &plane_rows<uint16_t>;
  return true;
}
#else
bool my_ops::row_kernels_avx512(RowKernels*) { return false; }
#endif
