// The kernels for AVX2 + FMA (x86-64 only; CMake adds the flags to this file alone), used where cpuid says the
// CPU has them.
#include "kernels_impl.h"

static_assert(L == 8, "kernels_avx2.cpp is compiled with -mavx2 -mfma");

bool pt2rt::lite::kernels_avx2(KernelSet* out) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  *out = kernel_set("avx2");
  return true;
}
