// Schemas of the my_ops namespace, shared input checks, and the CPU identity kernel.
#include "identity_conv.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

namespace my_ops {

namespace {

bool supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// Elements per parallel task: large enough that thread start-up does not dominate.
constexpr int64_t kCopyGrain = 1 << 15;
// Bytes below which a dense copy stays on one thread (measured: waking threads costs more than they save).
constexpr int64_t kParallelCopyBytes = 1 << 21;

template <typename scalar_t>
void copy_dense(const scalar_t* src, scalar_t* dst, int64_t n) {
  const int64_t grain = n * static_cast<int64_t>(sizeof(scalar_t)) < kParallelCopyBytes ? n : kCopyGrain;
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * sizeof(scalar_t));
  });
}

// Any 4-D strides on either side; one task per (n, c, h) row.
template <typename scalar_t>
void copy_strided(const at::Tensor& x, at::Tensor& out) {
  const int64_t C = x.size(1), H = x.size(2), W = x.size(3);
  const auto is = x.strides();
  const auto os = out.strides();
  const scalar_t* src = x.const_data_ptr<scalar_t>();
  scalar_t* dst = out.mutable_data_ptr<scalar_t>();
  const int64_t rows = x.size(0) * C * H;
  const int64_t grain = std::max<int64_t>(1, kCopyGrain / std::max<int64_t>(W, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t h = r % H, c = (r / H) % C, n = r / (H * C);
      const scalar_t* s = src + n * is[0] + c * is[1] + h * is[2];
      scalar_t* d = dst + n * os[0] + c * os[1] + h * os[2];
      const int64_t isw = is[3], osw = os[3];
      for (int64_t w = 0; w < W; ++w) d[w * osw] = s[w * isw];
    }
  });
}

}  // namespace

void check_input(const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.defined(), what, ": expected a tensor, got an undefined tensor");
  TORCH_CHECK(x.dim() == 4, what, ": expected a 4-D NCHW tensor, got a ", x.dim(),
              "-D tensor of shape ", x.sizes());
  TORCH_CHECK(supported_dtype(x.scalar_type()), what,
              ": expected dtype float32, float64, float16 or bfloat16, got ", x.scalar_type());
}

void check_weight(const at::Tensor& weight, int64_t channels, const char* what) {
  TORCH_CHECK(weight.defined(), what, ": expected a weight tensor, got an undefined tensor");
  TORCH_CHECK(supported_dtype(weight.scalar_type()), what,
              ": expected a weight of dtype float32, float64, float16 or bfloat16, got ",
              weight.scalar_type());
  const int64_t k = weight.dim() == 4 ? weight.size(2) : -1;
  TORCH_CHECK(weight.dim() == 4 && weight.size(0) == channels && weight.size(1) == 1 &&
                  weight.size(3) == k && k >= 1 && k <= kMaxKernelSize && k % 2 == 1,
              what, ": expected a depthwise weight of shape (", channels,
              ", 1, k, k) with k odd in 1..", kMaxKernelSize, ", got shape ", weight.sizes());
}

at::Tensor identity_conv_cpu(const at::Tensor& x) {
  check_input(x, "identity_conv_op");
  // Same strides as the input when it is dense, else contiguous; the fake does the same.
  at::Tensor out = at::empty_like(x);
  if (x.numel() == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "identity_conv_cpu", [&] {
    if (x.is_non_overlapping_and_dense() && out.strides() == x.strides()) {
      copy_dense(x.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), x.numel());
    } else {
      copy_strided<scalar_t>(x, out);
    }
  });
  return out;
}

}  // namespace my_ops

TORCH_LIBRARY(my_ops, m) {
  m.def("identity_conv_op(Tensor x) -> Tensor");
  m.def("depthwise_conv2d(Tensor x, Tensor weight) -> Tensor");
}

TORCH_LIBRARY_IMPL(my_ops, CPU, m) {
  m.impl("identity_conv_op", &my_ops::identity_conv_cpu);
  m.impl("depthwise_conv2d", &my_ops::depthwise_conv2d_cpu);
}
