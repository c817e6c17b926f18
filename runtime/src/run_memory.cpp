#include "run_memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <map>
#include <unordered_map>
#include <utility>

namespace pt2rt::detail {

namespace {

thread_local RunArena* t_arena = nullptr;

struct Block {
  c10::DataPtr memory;                // from the allocator behind ours
  size_t size = 0;
  uint64_t used_in = 0;               // the arena's run that last handed it out
  std::shared_ptr<RunArena> owner;    // set while handed out: the arena outlives what it lent
};

// Blocks handed out, by address: torch's raw_allocate/raw_deallocate (oneDNN's scratchpads through ideep) need a
// DataPtr whose context is its address and one deleter for every allocation, so the deleter looks the block up.
// Sharded: runs on several threads allocate and free at once.
class Lent {
 public:
  void add(void* p, Block* b) {
    Shard& s = shard(p);
    std::lock_guard<std::mutex> lock(s.mutex);
    s.blocks.emplace(p, b);
  }
  Block* take(void* p) {
    Shard& s = shard(p);
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.blocks.find(p);
    if (it == s.blocks.end()) return nullptr;
    Block* b = it->second;
    s.blocks.erase(it);
    return b;
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<void*, Block*> blocks;
  };
  Shard& shard(void* p) { return shards_[(reinterpret_cast<uintptr_t>(p) >> 6) % kShards]; }
  static constexpr size_t kShards = 16;
  Shard shards_[kShards];
};

// Never destroyed: torch may free through it past the library's static destructors.
Lent& lent() {
  static auto* blocks = new Lent;
  return *blocks;
}

// The raw deleter of the allocator behind ours, for what raw_allocate passed through to it.
std::atomic<c10::DeleterFnPtr> g_next_raw_deleter{nullptr};

void give_back(void* ptr);

}  // namespace

class RunArena : public std::enable_shared_from_this<RunArena> {
 public:
  explicit RunArena(c10::Allocator* next) : next_(next) {}
  ~RunArena() {
    for (auto& [size, b] : free_) delete b;
  }

  c10::DataPtr allocate(size_t n) {
    Block* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.lower_bound(n);  // the smallest that fits, if not twice the size
      if (it != free_.end() && it->first <= 2 * n) {
        block = it->second;
        free_.erase(it);
      }
    }
    if (block == nullptr) {
      block = new Block;
      block->memory = next_->allocate(n);
      block->size = n;
    }
    block->used_in = run_;
    block->owner = shared_from_this();
    void* data = block->memory.get();
    lent().add(data, block);
    return c10::DataPtr(data, data, &give_back, c10::Device(c10::kCPU));
  }

  void put_back(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace(block->size, block);
  }

  void begin_run() { ++run_; }

  // Frees the cached blocks the run that just ended did not use.
  void end_run() {
    std::vector<Block*> unused;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_.begin(); it != free_.end();) {
        if (it->second->used_in == run_) {
          ++it;
        } else {
          unused.push_back(it->second);
          it = free_.erase(it);
        }
      }
    }
    for (Block* b : unused) delete b;
  }

  c10::Allocator* next() const { return next_; }

 private:
  c10::Allocator* next_;
  std::mutex mutex_;
  std::multimap<size_t, Block*> free_;  // by size
  uint64_t run_ = 0;  // written by the run's own thread only
};

namespace {

void give_back(void* ptr) {
  Block* block = lent().take(ptr);
  if (block == nullptr) {  // raw_allocate's memory from the allocator behind ours
    g_next_raw_deleter.load(std::memory_order_acquire)(ptr);
    return;
  }
  std::shared_ptr<RunArena> owner = std::move(block->owner);  // may be the last reference: the arena then frees all
  owner->put_back(block);
}

// Serves the thread's arena during a run, else passes through.
class RunAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    RunArena* arena = t_arena;
    if (arena != nullptr && n > 0) return arena->allocate(n);
    return next_.load(std::memory_order_acquire)->allocate(n);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  // Ours wherever the allocator behind has one (torch's has): it takes back blocks and passes the rest on.
  c10::DeleterFnPtr raw_deleter() const override {
    return g_next_raw_deleter.load(std::memory_order_acquire) != nullptr ? &give_back : nullptr;
  }

  c10::Allocator* next() const { return next_.load(std::memory_order_acquire); }
  void set_next(c10::Allocator* next) { next_.store(next, std::memory_order_release); }

 private:
  std::atomic<c10::Allocator*> next_{nullptr};
};

// Never destroyed: torch may hold it past the library's static destructors.
RunAllocator& run_allocator() {
  static auto* allocator = new RunAllocator;
  return *allocator;
}

std::mutex g_install_mutex;

}  // namespace

bool install_run_allocator() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  RunAllocator& ours = run_allocator();
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current == &ours) return true;
  c10::Allocator* before = ours.next();
  const c10::DeleterFnPtr before_raw = g_next_raw_deleter.load();
  ours.set_next(current);
  g_next_raw_deleter.store(current->raw_deleter());
  c10::SetCPUAllocator(&ours, 0);
  if (c10::GetCPUAllocator() == &ours) {
    // torch now calls into this library for every CPU allocation: it must stay loaded as long as torch is
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&install_run_allocator), &self) != 0 && self.dli_fname != nullptr) {
      dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    }
    return true;
  }
  ours.set_next(before != nullptr ? before : current);
  g_next_raw_deleter.store(before != nullptr ? before_raw : current->raw_deleter());
  return false;
}

RunMemory::~RunMemory() = default;

RunMemory::Scope::Scope(RunMemory* memory) : memory_(memory) {
  if (memory_ == nullptr) return;
  c10::Allocator* next = run_allocator().next();
  if (c10::GetCPUAllocator() != &run_allocator() || next == nullptr) {
    memory_ = nullptr;  // another allocator took our place since load(): run without the cache
    return;
  }
  {
    std::lock_guard<std::mutex> lock(memory_->mutex_);
    while (!memory_->idle_.empty() && arena_ == nullptr) {
      arena_ = std::move(memory_->idle_.back());
      memory_->idle_.pop_back();
      if (arena_->next() != next) arena_.reset();  // made for the allocator behind ours before it changed
    }
  }
  if (arena_ == nullptr) arena_ = std::make_shared<RunArena>(next);
  arena_->begin_run();
  previous_ = t_arena;
  t_arena = arena_.get();
}

RunMemory::Scope::~Scope() {
  if (memory_ == nullptr) return;
  t_arena = previous_;
  arena_->end_run();
  std::lock_guard<std::mutex> lock(memory_->mutex_);
  memory_->idle_.push_back(std::move(arena_));
}

}  // namespace pt2rt::detail
