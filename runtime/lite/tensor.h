// The lite runtime's tensor: what an AtenTensorHandle points to in a lite process. Strided, CPU, sharing a
// reference-counted storage between views (as ATen's tensors do, which the model library's code assumes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "shim.h"

namespace pt2rt::lite {

// c10::ScalarType's numbering, which the model library's code compares against
enum ScalarType : int32_t {
  kUInt8 = 0, kInt8 = 1, kInt16 = 2, kInt32 = 3, kInt64 = 4, kFloat16 = 5, kFloat32 = 6, kFloat64 = 7,
  kBool = 11, kBFloat16 = 15,
};
constexpr int32_t kDeviceCpu = 0;
constexpr int32_t kDeviceCuda = 1;

// bytes of one element, 0 for a code this runtime does not know
std::size_t element_size(int32_t dtype);

struct Storage {
  void* data = nullptr;
  std::size_t nbytes = 0;
  bool owned = false;     // false: a blob someone else frees (constants, caller's inputs)
  std::size_t capacity = 0;  // of owned memory: the bytes allocated (a size class of the pool in tensor.cpp)
  bool constant = false;  // one of the model's constants (create_tensor_from_blob_v2): fixed for the model's life
  // Kernels' packed forms of a constant (weights rearranged for a convolution), by what they were packed for:
  // made once, freed with the constant.
  std::mutex pack_mutex;
  std::map<std::vector<int64_t>, std::shared_ptr<const std::vector<float>>> packs;
  ~Storage();
};

struct ShimTensor {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  int32_t dtype = kFloat32;
  int32_t device_type = kDeviceCpu;
  std::vector<int64_t> sizes, strides;

  void* data() const {
    return static_cast<char*>(storage->data) + offset * static_cast<int64_t>(element_size(dtype));
  }
  int64_t numel() const;
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  bool is_contiguous() const;
  bool is_non_overlapping_and_dense() const;
};

inline ShimTensor* as_tensor(AtenTensorHandle h) { return reinterpret_cast<ShimTensor*>(h); }
inline AtenTensorHandle as_handle(ShimTensor* t) { return reinterpret_cast<AtenTensorHandle>(t); }

// A new tensor of fresh memory (64-byte aligned) with the given sizes and strides.
std::unique_ptr<ShimTensor> empty_strided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                                      int32_t dtype);
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
// ATen's rule for a 4-d tensor's memory format (is_channels_last_strides_2d_s4): ambiguous cases are contiguous.
bool is_channels_last_2d(const ShimTensor& t);
// The strides of a copy that keeps t's memory format (preserve_format): t's own when it is dense, else
// channels-last or contiguous as suggest_memory_format says.
std::vector<int64_t> suggested_strides(const ShimTensor& t);

// Frees the memory empty_strided keeps for reuse (tensor.cpp's pool)
void trim_pool();

// Every element of src into dst: the same sizes and dtype, any strides.
void copy_strided(const ShimTensor& dst, const ShimTensor& src);

// What the last failed shim call on this thread said (the model library only sees an error code).
const std::string& last_error();
void set_last_error(std::string message);

}  // namespace pt2rt::lite
