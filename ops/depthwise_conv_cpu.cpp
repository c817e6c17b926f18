// CPU depthwise convolution, NCHW, stride 1, padding k/2.
#include "depthwise_row_kernel.h"
#include "identity_conv.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

namespace my_ops {

namespace {

// Output elements per parallel task.
constexpr int64_t kConvGrain = 1 << 14;

// The best row kernels this CPU runs, chosen once.
const RowKernels& row_kernels() {
  static const RowKernels k = [] {
    RowKernels avx2{};
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && row_kernels_avx2(&avx2)) return avx2;
#endif
    return row_kernels_baseline();
  }();
  return k;
}

// float, half and bfloat16: each task takes whole output rows of one plane. Input rows are converted to float
// once, into a ring of K+1 zero-padded rows, and the row kernels compute two output rows at a time from them.
template <typename scalar_t>
void depthwise_float(const scalar_t* in, const float* weight, scalar_t* out, int64_t C, int64_t H, int64_t W,
                     int64_t k, int64_t planes) {
  const int64_t pad = k / 2;
  const int64_t padded = W + 2 * pad + kRowSlack;
  const int64_t rows_per_task = std::max<int64_t>(1, std::min<int64_t>(H, kConvGrain / std::max<int64_t>(W, 1)));
  const int64_t blocks = (H + rows_per_task - 1) / rows_per_task;
  const RowKernels& kernels = row_kernels();
  const int64_t slots = k + 1;  // two output rows at a time need K+1 input rows
  at::parallel_for(0, planes * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> ring(static_cast<size_t>(slots * padded + padded + 2 * padded), 0.0f);
    float* zero = ring.data() + slots * padded;  // a row of zeros, for rows outside the image
    float* tmp0 = zero + padded;                 // output rows in float, for half types
    float* tmp1 = tmp0 + padded;
    std::vector<const float*> rows(static_cast<size_t>(slots));
    std::vector<int64_t> held(static_cast<size_t>(slots), -1);  // which input row each ring slot holds
    for (int64_t task = begin; task < end; ++task) {
      const int64_t plane = task / blocks;
      const int64_t h0 = (task % blocks) * rows_per_task, h1 = std::min(H, h0 + rows_per_task);
      const scalar_t* src = in + plane * H * W;
      const float* wk = weight + (plane % C) * k * k;
      std::fill(held.begin(), held.end(), -1);
      // Input row ih as a zero-padded float row, converted once per task.
      auto input_row = [&](int64_t ih) -> const float* {
        if (ih < 0 || ih >= H) return zero;
        const int64_t slot = ih % slots;
        float* r = ring.data() + slot * padded;
        if (held[slot] != ih) {
          const scalar_t* s = src + ih * W;  // the pads stay zero
          if constexpr (std::is_same_v<scalar_t, float>) {
            std::memcpy(r + pad, s, static_cast<size_t>(W) * sizeof(float));
          } else if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
            kernels.from_bf16(reinterpret_cast<const uint16_t*>(s), r + pad, W);
          } else {
            for (int64_t w = 0; w < W; ++w) r[pad + w] = static_cast<float>(s[w]);
          }
          held[slot] = ih;
        }
        return r;
      };
      auto store = [&](const float* from, int64_t h) {
        scalar_t* dst = out + (plane * H + h) * W;
        if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
          kernels.to_bf16(from, reinterpret_cast<uint16_t*>(dst), W);
        } else if constexpr (!std::is_same_v<scalar_t, float>) {
          for (int64_t w = 0; w < W; ++w) dst[w] = static_cast<scalar_t>(from[w]);
        }
      };
      for (int64_t h = h0; h < h1;) {
        const int64_t n = std::min<int64_t>(2, h1 - h);
        for (int64_t i = 0; i < k + n - 1; ++i) rows[i] = input_row(h + i - pad);
        float* o0 = tmp0;
        float* o1 = tmp1;
        if constexpr (std::is_same_v<scalar_t, float>) {
          o0 = out + (plane * H + h) * W;
          o1 = o0 + W;
        }
        if (n == 2) {
          kernels.conv2(rows.data(), wk, o0, o1, W, k);
        } else {
          kernels.conv(rows.data(), wk, o0, W, k);
        }
        if constexpr (!std::is_same_v<scalar_t, float>) {
          store(o0, h);
          if (n == 2) store(o1, h + 1);
        }
        h += n;
      }
    }
  });
}

// float64: a direct loop in double (not a speed target; kept exact).
void depthwise_double(const double* in, const double* weight, double* out, int64_t C, int64_t H, int64_t W,
                      int64_t k, int64_t rows) {
  const int64_t pad = k / 2;
  const int64_t grain = std::max<int64_t>(1, kConvGrain / std::max<int64_t>(W * k * k, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t h = r % H, plane = r / H;
      const double* src = in + plane * H * W;
      const double* wk = weight + (plane % C) * k * k;
      double* dst = out + r * W;
      std::fill(dst, dst + W, 0.0);
      for (int64_t i = 0; i < k; ++i) {
        const int64_t ih = h + i - pad;
        if (ih < 0 || ih >= H) continue;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t d = j - pad;
          const double wv = wk[i * k + j];
          for (int64_t w = std::max<int64_t>(0, -d); w < std::min<int64_t>(W, W - d); ++w) {
            dst[w] += wv * src[ih * W + w + d];
          }
        }
      }
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
  if (x.scalar_type() == at::kDouble) {
    const at::Tensor w = weight.to(at::kDouble).contiguous();
    depthwise_double(xc.const_data_ptr<double>(), w.const_data_ptr<double>(), out.mutable_data_ptr<double>(), C, H,
                     W, k, x.size(0) * C * H);
    return out;
  }
  const at::Tensor w = weight.to(at::kFloat).contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "depthwise_conv2d_cpu", [&] {
    if constexpr (!std::is_same_v<scalar_t, double>) {
      depthwise_float<scalar_t>(xc.const_data_ptr<scalar_t>(), w.const_data_ptr<float>(),
                                out.mutable_data_ptr<scalar_t>(), C, H, W, k, x.size(0) * C);
    }
  });
  return out;
}

}  // namespace my_ops
