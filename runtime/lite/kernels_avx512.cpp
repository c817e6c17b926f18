// The kernels for AVX-512 F/DQ/VL/BW + FMA, x86-64-v4 (x86-64 only; CMake adds the flags to this file alone),
// used where cpuid says the CPU has them.
#include "kernels_impl.h"

static_assert(L == 16, "kernels_avx512.cpp is compiled with -mavx512f and the rest of x86-64-v4");

bool pt2rt::lite::kernels_avx512(KernelSet* out) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("fma"))
    return false;
  *out = kernel_set("avx512");
  return true;
}
