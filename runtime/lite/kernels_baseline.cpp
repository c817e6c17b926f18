// The kernels for any CPU of the arch (SSE2 on x86-64, NEON on aarch64); and the choice among the sets.
#include <cstdlib>
#include <cstring>

#include "kernels_impl.h"

pt2rt::lite::KernelSet pt2rt::lite::kernels_baseline() { return kernel_set("baseline"); }

#if !defined(__x86_64__)
bool pt2rt::lite::kernels_avx2(KernelSet*) { return false; }
bool pt2rt::lite::kernels_avx512(KernelSet*) { return false; }
#endif

namespace {

pt2rt::lite::KernelSet pick() {
  using namespace pt2rt::lite;
  const char* asked = std::getenv("PT2RT_LITE_KERNELS");
  const bool any = asked == nullptr || *asked == '\0';
  KernelSet set;
  if ((any || std::strcmp(asked, "avx512") == 0) && kernels_avx512(&set)) return set;
  if ((any || std::strcmp(asked, "avx512") == 0 || std::strcmp(asked, "avx2") == 0) && kernels_avx2(&set)) return set;
  return kernels_baseline();
}

}  // namespace

const pt2rt::lite::KernelSet& pt2rt::lite::kernels() {
  static const KernelSet chosen = pick();
  return chosen;
}
