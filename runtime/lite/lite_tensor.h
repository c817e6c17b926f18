// pt2rt::Tensor in pt2rt-lite: contiguous CPU bytes with an owner that keeps them alive (an output's storage taken
// over from the model, or a buffer of its own).
#pragma once

#include <pt2rt/pt2rt.h>

#include <memory>
#include <vector>

namespace pt2rt {

struct Tensor::Impl {
  std::shared_ptr<void> owner;
  void* data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::Float32;
  std::size_t nbytes = 0;
};

namespace detail {

struct TensorAccess {
  // `data` (nbytes long) stays alive as long as `owner` does
  static Tensor make(void* data, std::shared_ptr<void> owner, std::vector<int64_t> shape, DType dtype,
                     std::size_t nbytes) {
    auto impl = std::make_shared<Tensor::Impl>();
    impl->data = data;
    impl->owner = std::move(owner);
    impl->shape = std::move(shape);
    impl->dtype = dtype;
    impl->nbytes = nbytes;
    return Tensor(std::move(impl));
  }
};

// A new tensor of uninitialised, 64-byte aligned memory (Error(Usage) for a shape check_shape refuses).
Tensor new_tensor(const std::vector<int64_t>& shape, DType dtype);
// The shim's dtype code of a DType and back (c10's numbering).
int32_t dtype_code(DType dtype);
std::optional<DType> dtype_of_code(int32_t code);

}  // namespace detail
}  // namespace pt2rt
