// Process-wide settings: torch's intra-op threads (malloc's policy: malloc_policy.cpp).
#include "internal.h"

#include <ATen/Parallel.h>

#include <atomic>


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

}  // namespace pt2rt
