// The row kernels compiled for AVX2 + FMA (CMake adds -mavx2 -mfma to this file only).
#include "depthwise_row_kernel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "depthwise_row_impl.h"
bool my_ops::row_kernels_avx2(RowKernels* out) {
  *out = kernels();
  return true;
}
#else
bool my_ops::row_kernels_avx2(RowKernels*) { return false; }
#endif
