// Process-wide malloc policy for serving (pt2rt.h: keep_freed_memory); the same in the full runtime and in lite.
#include "common.h"

#include <limits>
#include <string>

#if defined(__GLIBC__)
#include <dlfcn.h>
#include <malloc.h>
#endif

namespace pt2rt {

bool keep_freed_memory(std::size_t retain_bytes) {
  if (retain_bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw Error(ErrorCode::Usage, "keep_freed_memory: expected at most " +
                                      std::to_string(std::numeric_limits<int>::max()) + " bytes, got " +
                                      std::to_string(retain_bytes));
  }
#if defined(__GLIBC__)
  // jemalloc's in the process (linked into pt2run and pt2serve, or preloaded): glibc's heap serves nobody
  if (dlsym(RTLD_DEFAULT, "mallctl") != nullptr) return false;
  // 32 MiB is glibc's largest mmap threshold on 64-bit (a fixed value also ends its dynamic adjustment); past it a
  // block is mmapped, and unmapped on free, unless mmaps are off (M_MMAP_MAX 0): then it comes from a heap too. A
  // block larger than a thread arena's 64 MiB heaps is still mmapped (glibc's fallback). The top pad is what a trim
  // leaves at the top; it also keeps a thread arena's heap past its first from being unmapped once empty (glibc
  // unmaps it only while the heap before it has less than the pad free: never, at 64 MiB or more).
  const int retain = static_cast<int>(retain_bytes);
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_MMAP_MAX, 0) == 1 &&
         mallopt(M_TRIM_THRESHOLD, retain) == 1 && mallopt(M_TOP_PAD, retain) == 1;
#else
  return false;
#endif
}

}  // namespace pt2rt
