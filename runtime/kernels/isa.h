// Which ISA's build of a kernel (rnn_<isa>.cpp) a process runs: the widest this CPU has among those built;
// ATEN_CPU_CAPABILITY (torch's switch: default, avx2, avx512) caps it, for tests of each and as torch does.
#pragma once

#include <cstdlib>
#include <string>

namespace pt2rt::kernels {

// avx2 / avx512: null where the library was built without them (not x86-64)
template <class Fn>
Fn widest_isa(Fn baseline, Fn avx2, Fn avx512) {
  const char* env = std::getenv("ATEN_CPU_CAPABILITY");
  const std::string cap = env != nullptr ? env : "";
  if (cap == "default") return baseline;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool has_avx512 = has_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (has_avx512 && cap != "avx2" && avx512 != nullptr) return avx512;
  if (has_avx2 && avx2 != nullptr) return avx2;
#endif
  (void)avx2;
  (void)avx512;
  return baseline;
}

}  // namespace pt2rt::kernels
