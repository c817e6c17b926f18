// Process-wide settings for serving: torch's intra-op threads, malloc's policy for freed memory.
#include "internal.h"

#include <ATen/Parallel.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pt2rt {

void set_num_threads(int threads) {
  if (threads < 1) throw Error(ErrorCode::Usage, "set_num_threads: expected at least 1 thread, got " + std::to_string(threads));
  at::set_num_threads(threads);
}

int num_threads() { return at::get_num_threads(); }

bool keep_freed_memory(std::size_t retain_bytes) {
  if (retain_bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw Error(ErrorCode::Usage, "keep_freed_memory: expected at most " +
                                      std::to_string(std::numeric_limits<int>::max()) + " bytes, got " +
                                      std::to_string(retain_bytes));
  }
#if defined(__GLIBC__)
  // 32 MiB is glibc's largest mmap threshold on 64-bit (a fixed value also ends its dynamic adjustment).
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, static_cast<int>(retain_bytes)) == 1;
#else
  return false;
#endif
}

}  // namespace pt2rt
