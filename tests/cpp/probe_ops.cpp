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
#include <thread>

namespace {

std::atomic<int> in_flight{0};
std::atomic<int> most_in_flight{0};

at::Tensor hold(const at::Tensor& x, int64_t micros) {
  TORCH_CHECK(!x.isposinf().any().item<bool>(), "pt2rt_probe::hold was asked to fail (its input holds +inf)");
  const int now = ++in_flight;
  int seen = most_in_flight.load();
  while (now > seen && !most_in_flight.compare_exchange_weak(seen, now)) {
  }
  std::this_thread::sleep_for(std::chrono::microseconds(micros));
  --in_flight;
  return x + 1;
}

}  // namespace

// The most calls of hold() that were running at the same time since the last call of this function.
extern "C" __attribute__((visibility("default"))) int pt2rt_probe_take_most_in_flight() {
  return most_in_flight.exchange(0);
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
