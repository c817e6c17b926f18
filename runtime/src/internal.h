// Internals of libpt2rt shared by its source files; torch lives here, never in the public header.
#pragma once

#include <pt2rt/pt2rt.h>

#include "common.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace pt2rt {

struct Tensor::Impl {
  at::Tensor t;  // contiguous
  std::vector<int64_t> shape;
  DType dtype;
};

namespace detail {

// The library's own access to a Tensor's torch tensor.
struct TensorAccess {
  static const at::Tensor& aten(const Tensor& t) { return t.impl_->t; }
  // `t` must be contiguous.
  static Tensor make(at::Tensor t, DType dtype) {
    auto impl = std::make_shared<Tensor::Impl>();
    impl->shape = t.sizes().vec();
    impl->t = std::move(t);
    impl->dtype = dtype;
    return Tensor(std::move(impl));
  }
};

at::ScalarType to_scalar_type(DType dtype);
std::optional<DType> from_scalar_type(at::ScalarType t);
Tensor wrap(at::Tensor t);                 // makes it contiguous; no copy when it is already
at::Tensor borrow(const TensorView& view);  // no copy; the view must outlive the result

// Ops libraries.
std::vector<std::string> load_ops_libraries(const Spec& spec, const std::string& package_path, const Options& options);
void check_registered(const Spec& spec, const std::vector<std::string>& loaded);

// Host checks.
void check_host(const Spec& spec, const Options& options);
// Why a package exported by torch `package_torch` cannot load under `runtime_torch`; "" when it can (compat.cpp).
std::string why_not_loadable(const std::string& package_torch, const std::string& runtime_torch);

// Gives the calling thread's OpenMP (and MKL) team the size set_num_threads set, once per thread and setting:
// torch sizes a thread's team only inside its own parallel ops, and a model made of inductor kernels and oneDNN
// calls never enters one - its runs would take every core whatever was asked.
void apply_num_threads();

}  // namespace detail
}  // namespace pt2rt
