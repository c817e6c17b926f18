// CPU depthwise convolution, NCHW, stride 1, padding k/2.
#include "identity_conv.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace my_ops {

namespace {

// Output elements per parallel task.
constexpr int64_t kConvGrain = 1 << 14;

// One task computes whole output rows: for each kernel tap, a contiguous run of the input row is
// scaled and added to a row accumulator, so the innermost loop is unit-stride and vectorises.
template <typename scalar_t>
void depthwise_rows(const scalar_t* in, const at::opmath_type<scalar_t>* weight, scalar_t* out,
                    int64_t C, int64_t H, int64_t W, int64_t k, int64_t rows) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t pad = k / 2;
  const int64_t grain = std::max<int64_t>(1, kConvGrain / std::max<int64_t>(W * k * k, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> acc(W);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t h = r % H;
      const int64_t plane = r / H;
      const scalar_t* src = in + plane * H * W;
      const acc_t* wk = weight + (plane % C) * k * k;
      std::fill(acc.begin(), acc.end(), acc_t(0));
      acc_t* __restrict__ a = acc.data();
      for (int64_t i = 0; i < k; ++i) {
        const int64_t ih = h + i - pad;
        if (ih < 0 || ih >= H) continue;
        const scalar_t* __restrict__ row = src + ih * W;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t d = j - pad;
          const acc_t wv = wk[i * k + j];
          const int64_t w0 = std::max<int64_t>(0, -d);
          const int64_t w1 = std::min<int64_t>(W, W - d);
          for (int64_t w = w0; w < w1; ++w) a[w] += wv * static_cast<acc_t>(row[w + d]);
        }
      }
      scalar_t* __restrict__ dst = out + r * W;
      for (int64_t w = 0; w < W; ++w) dst[w] = static_cast<scalar_t>(a[w]);
    }
  });
}

}  // namespace

at::Tensor depthwise_conv2d_cpu(const at::Tensor& x, const at::Tensor& weight) {
  check_input(x, "depthwise_conv2d");
  check_weight(weight, x.size(1), "depthwise_conv2d");
  TORCH_CHECK(weight.device().is_cpu(), "depthwise_conv2d: expected the weight on the input's device cpu, got ",
              weight.device());
  // The kernel reads NCHW; other layouts are copied once.
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  if (x.numel() == 0) return out;
  const int64_t C = x.size(1), H = x.size(2), W = x.size(3), k = weight.size(2);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "depthwise_conv2d_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const at::Tensor w = weight.to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
    depthwise_rows<scalar_t>(xc.const_data_ptr<scalar_t>(), w.const_data_ptr<acc_t>(),
                             out.mutable_data_ptr<scalar_t>(), C, H, W, k, x.size(0) * C * H);
  });
  return out;
}

}  // namespace my_ops
