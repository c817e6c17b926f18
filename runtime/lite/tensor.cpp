#include "tensor.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>

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

Storage::~Storage() {
  if (owned) std::free(data);
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
  // the storage spans the furthest element the strides reach (as ATen's empty_strided sizes it)
  int64_t span = 1;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) { span = 0; break; }
    span += (sizes[d] - 1) * strides[d];
  }
  auto storage = std::make_shared<Storage>();
  storage->nbytes = static_cast<std::size_t>(span) * item;
  std::size_t rounded = (storage->nbytes + 63) / 64 * 64;
  storage->data = std::aligned_alloc(64, rounded > 0 ? rounded : 64);
  if (storage->data == nullptr) throw std::bad_alloc();
  storage->owned = true;
  auto t = std::make_unique<ShimTensor>();
  t->storage = std::move(storage);
  t->dtype = dtype;
  t->sizes = sizes;
  t->strides = strides;
  return t;
}

namespace {
thread_local std::string error_message;
}
const std::string& last_error() { return error_message; }
void set_last_error(std::string message) { error_message = std::move(message); }

}  // namespace pt2rt::lite
