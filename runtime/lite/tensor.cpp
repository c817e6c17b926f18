#include "tensor.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <unordered_map>

namespace pt2rt::lite {

std::size_t element_size(int32_t dtype) {
  switch (dtype) {
    case kUInt8: case kInt8: case kBool: return 1;
    case kInt16: case kFloat16: case kBFloat16: return 2;
    case kInt32: case kFloat32: return 4;
    case kInt64: case kFloat64: return 8;
    default: return 0;
  }
}

namespace {

// Freed storages kept by size for the next run's tensors of the same sizes: a model's intermediates repeat from
// run to run, and fresh memory costs a page fault per 4 KB each time. At most kPoolBytes kept; the rest freed.
constexpr std::size_t kPoolBytes = std::size_t{256} << 20;

struct Pool {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<void*>> free;
  std::size_t kept = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: a storage may outlive static destruction (a caller's output)
  return *p;
}

// 64-byte multiples below a page, whole pages above
std::size_t size_class(std::size_t bytes) {
  return bytes < 4096 ? std::max<std::size_t>(64, (bytes + 63) / 64 * 64) : (bytes + 4095) / 4096 * 4096;
}

void* acquire(std::size_t capacity) {
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    auto it = p.free.find(capacity);
    if (it != p.free.end() && !it->second.empty()) {
      void* data = it->second.back();
      it->second.pop_back();
      p.kept -= capacity;
      return data;
    }
  }
  void* data = std::aligned_alloc(64, capacity);
  if (data == nullptr) throw std::bad_alloc();
  return data;
}

void release(void* data, std::size_t capacity) {
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.kept + capacity <= kPoolBytes) {
      p.free[capacity].push_back(data);
      p.kept += capacity;
      return;
    }
  }
  std::free(data);
}

}  // namespace

void trim_pool() {
  Pool& p = pool();
  std::unordered_map<std::size_t, std::vector<void*>> kept;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    kept.swap(p.free);
    p.kept = 0;
  }
  for (auto& [capacity, blocks] : kept)
    for (void* data : blocks) std::free(data);
}

Storage::~Storage() {
  if (owned) release(data, capacity);
}

int64_t ShimTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool ShimTensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

bool ShimTensor::is_non_overlapping_and_dense() const {
  // some order of the dimensions in which the strides are those of a contiguous tensor
  std::vector<int64_t> order(sizes.size());
  for (std::size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int64_t>(d);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (sizes[a] < 2 || sizes[b] < 2) return sizes[a] < 2 && sizes[b] >= 2;
    return strides[a] < strides[b];
  });
  int64_t expected = 1;
  for (int64_t d : order) {
    if (sizes[d] < 2) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

bool is_channels_last_2d(const ShimTensor& t) {
  // ATen's rule (is_channels_last_strides_2d_s4), ambiguous cases falling back to contiguous
  if (t.dim() != 4 || t.strides[1] == 0) return false;
  int64_t min = 0;
  for (int d : {1, 3, 2, 0}) {
    if (t.sizes[d] == 0 || t.strides[d] < min) return false;
    if (d == 0 && min == t.strides[1]) return false;
    min = t.strides[d];
    if (t.sizes[d] > 1) min *= t.sizes[d];
  }
  return true;
}

std::vector<int64_t> suggested_strides(const ShimTensor& t) {
  if (t.is_non_overlapping_and_dense()) return t.strides;
  if (is_channels_last_2d(t)) {
    const auto& z = t.sizes;
    return {z[1] * z[2] * z[3], 1, z[3] * z[1], z[1]};
  }
  return contiguous_strides(t.sizes);
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    strides[d] = s;
    s *= sizes[d] > 0 ? sizes[d] : 1;
  }
  return strides;
}

std::unique_ptr<ShimTensor> empty_strided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                      int32_t dtype) {
  std::size_t item = element_size(dtype);
  if (item == 0) throw std::invalid_argument("dtype code " + std::to_string(dtype) + " is not one lite runs");
  // the storage spans the furthest element the strides reach (as ATen's empty_strided sizes it); a size past
  // int64 bytes is refused as ATen refuses it
  int64_t span = 1;
  bool overflow = false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0) throw std::invalid_argument("empty_strided: a negative size or stride");
    if (sizes[d] == 0) {
      span = 0;
      break;
    }
    int64_t reach = 0;
    overflow |= __builtin_mul_overflow(sizes[d] - 1, strides[d], &reach);
    overflow |= __builtin_add_overflow(span, reach, &span);
  }
  int64_t bytes = 0;
  overflow |= __builtin_mul_overflow(span, static_cast<int64_t>(item), &bytes);
  if (overflow || bytes > INT64_MAX - 64) throw std::length_error("empty_strided: the storage would pass 2^63 bytes");
  auto storage = std::make_shared<Storage>();
  storage->nbytes = static_cast<std::size_t>(bytes);
  storage->capacity = size_class(storage->nbytes);
  storage->data = acquire(storage->capacity);
  storage->owned = true;
  auto t = std::make_unique<ShimTensor>();
  t->storage = std::move(storage);
  t->dtype = dtype;
  t->sizes = sizes;
  t->strides = strides;
  return t;
}

// The copy of every element of src into dst (same sizes, any strides), by bytes of the element size.
void copy_strided(const ShimTensor& dst, const ShimTensor& src) {
  if (dst.sizes != src.sizes) throw std::invalid_argument("copy_ between tensors of different sizes");
  if (dst.dtype != src.dtype) throw std::invalid_argument("copy_ between dtypes is not in lite");
  const std::size_t item = element_size(dst.dtype);
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (dst.is_contiguous() && src.is_contiguous()) {
    std::memmove(dst.data(), src.data(), static_cast<std::size_t>(n) * item);
    return;
  }
  const int64_t nd = dst.dim();
  std::vector<int64_t> index(nd, 0);
  auto* d = static_cast<char*>(dst.data());
  const auto* s = static_cast<const char*>(src.data());
  for (int64_t i = 0; i < n; ++i) {
    int64_t od = 0, os = 0;
    for (int64_t k = 0; k < nd; ++k) {
      od += index[k] * dst.strides[k];
      os += index[k] * src.strides[k];
    }
    std::memcpy(d + od * static_cast<int64_t>(item), s + os * static_cast<int64_t>(item), item);
    for (int64_t k = nd - 1; k >= 0; --k) {
      if (++index[k] < dst.sizes[k]) break;
      index[k] = 0;
    }
  }
}

namespace {
thread_local std::string error_message;
}
const std::string& last_error() { return error_message; }
void set_last_error(std::string message) { error_message = std::move(message); }

}  // namespace pt2rt::lite
