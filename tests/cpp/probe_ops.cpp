// libpt2rt_probe_ops.so: a test-only ops library whose op reports how many of its calls ran at once.
//   pt2rt_probe::hold(Tensor x, int micros) -> Tensor   returns x + 1 after holding the call for `micros`;
//                                                         fails when x holds +inf (an error inside a model)
// A package that calls it shows whether the runtime ran several runs concurrently (num_runners > 1) or one at a
// time (num_runners == 1), which timing alone cannot show on a 2-core machine. Also a second ops library with its
// own namespace, found through the spec like any user's.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace {

std::atomic<int> in_flight{0};
std::atomic<int> most_in_flight{0};

// A meeting (pt2rt_probe_meet): calls wait inside hold() until `meet_at` of them are in flight together, so whether
// the runtime lets runs overlap does not depend on how the threads happen to be scheduled. Once met, or after 60 s
// (the runtime never let them meet), it is over and calls go on.
std::mutex meet_mutex;
std::condition_variable met;
int meet_at = 0;

void meet(int now) {
  std::unique_lock<std::mutex> lock(meet_mutex);
  if (meet_at == 0) return;
  if (now >= meet_at) {
    meet_at = 0;
    met.notify_all();
    return;
  }
  if (!met.wait_for(lock, std::chrono::seconds(60), [] { return meet_at == 0 || in_flight.load() >= meet_at; })) {
    meet_at = 0;
  }
  met.notify_all();
}

at::Tensor hold(const at::Tensor& x, int64_t micros) {
  TORCH_CHECK(!x.isposinf().any().item<bool>(), "pt2rt_probe::hold was asked to fail (its input holds +inf)");
  const int now = ++in_flight;
  int seen = most_in_flight.load();
  while (now > seen && !most_in_flight.compare_exchange_weak(seen, now)) {
  }
  meet(now);
  std::this_thread::sleep_for(std::chrono::microseconds(micros));
  --in_flight;
  return x + 1;
}

}  // namespace

// The most calls of hold() that were running at the same time since the last call of this function.
extern "C" __attribute__((visibility("default"))) int pt2rt_probe_take_most_in_flight() {
  return most_in_flight.exchange(0);
}

// The next calls of hold() wait for each other until `calls` of them run at once (see meet above); 0: no meeting.
extern "C" __attribute__((visibility("default"))) void pt2rt_probe_meet(int calls) {
  std::lock_guard<std::mutex> lock(meet_mutex);
  meet_at = calls;
  met.notify_all();
}

// PT2RT_PROBE_V2: another build of the library whose op has another schema (the stale-library tests).
#ifdef PT2RT_PROBE_V2
at::Tensor hold_v2(const at::Tensor& x, int64_t micros, bool) { return hold(x, micros); }
TORCH_LIBRARY(pt2rt_probe, m) { m.def("hold(Tensor x, int micros, bool twice=False) -> Tensor"); }
TORCH_LIBRARY_IMPL(pt2rt_probe, CPU, m) { m.impl("hold", &hold_v2); }
#else
TORCH_LIBRARY(pt2rt_probe, m) { m.def("hold(Tensor x, int micros) -> Tensor"); }
TORCH_LIBRARY_IMPL(pt2rt_probe, CPU, m) { m.impl("hold", &hold); }
#endif
