// MKL (linked into libtorch_cpu on x86-64) asks mkl_serv_intel_cpu_true() whether the CPU is Intel's and, where it is
// not, runs its generic code: on AMD its sgemm (1x1 convolutions, linear layers, attention, recurrent input products)
// takes the mkl_blas_def_*_zen kernels instead of its AVX2 / AVX-512 ones. libtorch_cpu calls that function through
// its PLT, and libpt2rt comes before it in the lookup order, so the definition here answers for the process: yes for
// an AMD CPU with AVX2 + FMA, after which MKL picks its code by the CPU's feature bits as it does on Intel.
#include "common.h"

#include <pt2rt/pt2rt.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace pt2rt {

namespace {

#if defined(__x86_64__)
bool host_is_intel_for_mkl() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return false;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  if (std::strcmp(vendor, "GenuineIntel") == 0) return true;
  // PT2RT_MKL_VENDOR_CHECK=1: MKL's own answer (no for every CPU but Intel's)
  const char* keep_check = std::getenv("PT2RT_MKL_VENDOR_CHECK");
  if (keep_check != nullptr && std::strcmp(keep_check, "1") == 0) return false;
  if (std::strcmp(vendor, "AuthenticAMD") != 0) return false;
  const auto have = host_cpu_features();  // as far as the OS saves their registers
  const auto has = [&have](const char* f) { return std::find(have.begin(), have.end(), f) != have.end(); };
  return has("avx2") && has("fma");
}
#endif

}  // namespace

}  // namespace pt2rt

#if defined(__x86_64__)
extern "C" PT2RT_API int mkl_serv_intel_cpu_true() {
  static const int answer = pt2rt::host_is_intel_for_mkl() ? 1 : 0;
  return answer;
}
#endif
