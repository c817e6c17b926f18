// Process-wide settings: torch's intra-op threads (malloc's policy: malloc_policy.cpp).
#include "internal.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <atomic>


namespace pt2rt {

namespace {
std::atomic<int> g_threads_setting{0};  // counts set_num_threads calls: a thread applies each setting once
}  // namespace

void set_num_threads(int threads) {
  detail::check_intra_op_threads(threads, "set_num_threads: threads");
  at::set_num_threads(threads);
  g_threads_setting.fetch_add(1, std::memory_order_release);
}

void detail::apply_num_threads() {
  thread_local int applied = -1;
  const int setting = g_threads_setting.load(std::memory_order_acquire);
  if (applied == setting) return;
  applied = setting;
  // torch's own once-per-thread setup first (get_num_threads runs it): else the first parallel op of this thread's
  // first run would run it inside the run and undo a runtime's intra_op_threads for the rest of that run
  at::get_num_threads();
  at::init_num_threads();  // this thread's OpenMP and MKL threads := torch's setting (its default when none was set)
}

int num_threads() { return at::get_num_threads(); }

namespace {
// The OpenMP runtime torch runs on and MKL's per-thread setting, as loaded with libtorch_cpu (libpt2rt links no
// OpenMP of its own: a second one in the process would keep teams of its own). Looked up through libtorch_cpu's
// handle, which also finds them where libpt2rt was loaded privately (RTLD_LOCAL: a plugin, C#, ctypes).
struct ThreadControls {
  int (*get_max_threads)() = nullptr;
  void (*set_num_threads)(int) = nullptr;
  int (*mkl_set_local)(int) = nullptr;  // absent where torch has no MKL (aarch64)
};

const ThreadControls& thread_controls() {
  static const ThreadControls controls = [] {
    ThreadControls c;
    void* torch = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
    const auto find = [torch](const char* name) {
      void* f = torch ? dlsym(torch, name) : nullptr;
      return f ? f : dlsym(RTLD_DEFAULT, name);
    };
    c.get_max_threads = reinterpret_cast<int (*)()>(find("omp_get_max_threads"));
    c.set_num_threads = reinterpret_cast<void (*)(int)>(find("omp_set_num_threads"));
    // MKL's C name (mkl_set_num_threads_local is its Fortran entry: the count by pointer)
    c.mkl_set_local = reinterpret_cast<int (*)(int)>(find("MKL_Set_Num_Threads_Local"));
    if (!c.get_max_threads || !c.set_num_threads) c = ThreadControls{};
    return c;
  }();
  return controls;
}
}  // namespace

void detail::check_run_threads() {
  if (!thread_controls().set_num_threads) {
    throw Error(ErrorCode::Runtime, "intra_op_threads: torch's OpenMP runtime (omp_set_num_threads) was not found "
                                    "in this process; this libtorch cannot size a run's threads");
  }
}

detail::RunThreads::RunThreads(int threads) {
  const ThreadControls& c = thread_controls();
  if (threads <= 0 || !c.set_num_threads) return;
  changed_ = true;
  previous_ = c.get_max_threads();
  c.set_num_threads(threads);
  if (c.mkl_set_local) previous_mkl_ = c.mkl_set_local(threads);
}

detail::RunThreads::~RunThreads() {
  if (!changed_) return;
  const ThreadControls& c = thread_controls();
  c.set_num_threads(previous_);
  if (c.mkl_set_local) c.mkl_set_local(previous_mkl_);
}

}  // namespace pt2rt
