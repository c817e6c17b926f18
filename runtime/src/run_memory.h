// Memory that a model's runs reuse (Options::reuse_run_memory): the CPU buffers AOTInductor's code and ATen's
// operators allocate on the calling thread during a run come from a cache of the blocks the previous runs freed,
// so a model whose shapes do not change allocates nothing once warm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace pt2rt::detail {

class RunArena;

// A Runtime's arenas, one per run in flight at once (each run checks one out).
class RunMemory {
 public:
  RunMemory() = default;
  RunMemory(const RunMemory&) = delete;
  RunMemory& operator=(const RunMemory&) = delete;
  ~RunMemory();

  // While it lives, CPU allocations of this thread come from one arena of `memory` (null: none, a no-op). At its
  // end the arena releases the cached blocks this run did not reuse (its memory follows the latest run's needs,
  // whatever the shapes did before) and goes back to the pool.
  class Scope {
   public:
    explicit Scope(RunMemory* memory);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    RunMemory* memory_;
    std::shared_ptr<RunArena> arena_;
    RunArena* previous_ = nullptr;
  };

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<RunArena>> idle_;
};

// Puts the caching CPU allocator in front of the one torch has (c10::SetCPUAllocator, priority 0) unless it is
// there: false where an allocator registered with a higher priority keeps its place (then nothing is cached).
bool install_run_allocator();

}  // namespace pt2rt::detail
