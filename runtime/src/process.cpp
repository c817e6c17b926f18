// Process-wide settings for serving: torch's intra-op threads, malloc's policy for freed memory.
#include "internal.h"

#include <ATen/Parallel.h>

#include <atomic>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pt2rt {

namespace {
std::atomic<int> g_threads_setting{0};  // counts set_num_threads calls: a thread applies each setting once
}  // namespace

void set_num_threads(int threads) {
  if (threads < 1) throw Error(ErrorCode::Usage, "set_num_threads: expected at least 1 thread, got " + std::to_string(threads));
  at::set_num_threads(threads);
  g_threads_setting.fetch_add(1, std::memory_order_release);
}

void detail::apply_num_threads() {
  thread_local int applied = -1;
  const int setting = g_threads_setting.load(std::memory_order_acquire);
  if (applied == setting) return;
  applied = setting;
  at::init_num_threads();  // this thread's OpenMP and MKL threads := torch's setting (its default when none was set)
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
