// The malloc of pt2run and pt2serve. With PT2RT_JEMALLOC the executable links jemalloc's archive and exports its
// malloc, free, posix_memalign and the rest (runtime/CMakeLists.txt): every library of the process allocates
// through it - libtorch's tensors, oneDNN's primitives, the model's buffers, libstdc++'s operator new. glibc's
// malloc took 5 % of a MobileNetV3-Small run (malloc_consolidate, its bins); jemalloc's per-thread caches make
// those calls cheap (docs/performance.md). libpt2rt itself picks no allocator: the process that embeds it does.
#include "allocator.h"

#if defined(PT2RT_JEMALLOC)
#include <jemalloc/jemalloc.h>

// No arena of its own for blocks past 8 MiB (jemalloc's oversize_threshold): that arena gives its freed pages
// back at once, and a ResNet-18 at batch 8 faulted its activations in again on every run (+20 %). The others keep
// jemalloc's 10 s decay, which runs as the arena is used (no background thread): an idle process keeps what its
// last burst freed. MALLOC_CONF in the environment overrides.
extern "C" {
const char* malloc_conf = "oversize_threshold:0";
}
#else
#include <gnu/libc-version.h>
#include <malloc.h>
#endif

#include <string>

namespace pt2rt::cli {

std::string allocator_name() {
#if defined(PT2RT_JEMALLOC)
  const char* version = nullptr;
  std::size_t size = sizeof(version);
  if (mallctl("version", &version, &size, nullptr, 0) != 0 || version == nullptr) return "jemalloc";
  return std::string("jemalloc ") + version;
#else
  return std::string("glibc ") + gnu_get_libc_version();
#endif
}

std::size_t allocated_bytes() {
#if defined(PT2RT_JEMALLOC)
  uint64_t epoch = 1;  // jemalloc's statistics are a snapshot taken when the epoch advances
  std::size_t size = sizeof(epoch);
  std::size_t allocated = 0, allocated_size = sizeof(allocated);
  if (mallctl("epoch", &epoch, &size, &epoch, size) != 0 ||
      mallctl("stats.allocated", &allocated, &allocated_size, nullptr, 0) != 0) {
    return 0;
  }
  return allocated;
#else
  return 0;
#endif
}

void release_free_memory() {
#if defined(PT2RT_JEMALLOC)
  const std::string purge = "arena." + std::to_string(MALLCTL_ARENAS_ALL) + ".purge";
  mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
#else
  malloc_trim(0);
#endif
}

}  // namespace pt2rt::cli
