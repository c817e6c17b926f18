// my_ops::depthwise_conv2d on the CPU: depthwise convolution, NCHW, stride 1, padding k/2.
#include "depthwise_row_kernel.h"
#include "identity_conv.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace my_ops {

namespace {

// Output elements per parallel task.
constexpr int64_t kConvGrain = 1 << 14;
// Multiply-adds a thread must have before another one is woken (waking one costs ~5-10 us).
constexpr int64_t kMinMacsPerThread = int64_t{1} << 16;
// Output rows per row-kernel call (even: the kernels take rows in pairs).
constexpr int64_t kChunkRows = 8;

// The best row kernels this CPU runs, chosen once. ATEN_CPU_CAPABILITY (torch's switch for its own kernels:
// default, avx2, avx512) caps the choice here too; avx512 is x86-64-v4 (F/DQ/VL/BW), so it also leaves out the
// AVX512-BF16 variant, which only an unset (or unknown) value picks.
const RowKernels& row_kernels() {
  static const RowKernels k = [] {
    const char* env = std::getenv("ATEN_CPU_CAPABILITY");
    const std::string cap = env != nullptr ? env : "";
    if (cap == "default") return row_kernels_baseline();
    [[maybe_unused]] RowKernels chosen{};  // filled by an x86 variant below
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();  // libgcc's checks include the OS's XCR0 state for AVX and AVX-512
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
    if (bf16 && cap != "avx2" && cap != "avx512" && row_kernels_avx512_bf16(&chosen)) return chosen;
    if (avx512 && cap != "avx2" && row_kernels_avx512(&chosen)) return chosen;
    if (avx2 && row_kernels_avx2(&chosen)) return chosen;
#endif
    return row_kernels_baseline();
  }();
  return k;
}

// float, half and bfloat16: each task takes whole output rows of one plane. Where the CPU's kernels read planes
// in place (AVX-512: float and bfloat16), a task is one call; otherwise its input rows (with the K/2 halo rows
// above and below) are converted to float once, into a buffer of zero-padded rows, and the row kernels compute two
// output rows at a time from it.
template <typename scalar_t>
void depthwise_float(const scalar_t* in, const float* weight, scalar_t* out, int64_t C, int64_t H, int64_t W,
                     int64_t k, int64_t planes) {
  const int64_t pad = k / 2;
  const int64_t padded = (W + 2 * pad + kRowSlack + kRowAlign - 1) / kRowAlign * kRowAlign;
  const int64_t rows_per_task = std::max<int64_t>(1, std::min<int64_t>(H, kConvGrain / std::max<int64_t>(W, 1)));
  const int64_t blocks = (H + rows_per_task - 1) / rows_per_task;
  const RowKernels& kernels = row_kernels();
  DepthwisePlaneFn plane = nullptr;
  if constexpr (std::is_same_v<scalar_t, float>) plane = kernels.plane_f32;
  if constexpr (std::is_same_v<scalar_t, at::BFloat16>) plane = kernels.plane_bf16;
  if (!plane_kernel_takes(k)) plane = nullptr;
  const int64_t tasks = planes * blocks;
  // Threads only for enough work to pay for waking them; tasks handed out in small chunks as threads ask, so a
  // core slowed by something else (a shared machine) does less of the work instead of holding the others up.
  const int64_t workers = std::min<int64_t>(
      {at::get_num_threads(), tasks, std::max<int64_t>(1, planes * H * W * k * k / kMinMacsPerThread)});
  const int64_t chunk = workers == 1 ? tasks : std::clamp<int64_t>(tasks / (workers * 8), 1, 8);
  std::atomic<int64_t> next_chunk{0};
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    if (plane != nullptr) {
      for (int64_t begin; (begin = next_chunk.fetch_add(chunk)) < tasks;) {
        for (int64_t task = begin; task < std::min(tasks, begin + chunk); ++task) {
          const int64_t p = task / blocks, h0 = (task % blocks) * rows_per_task;
          plane(in + p * H * W, H, W, weight + (p % C) * k * k, out + p * H * W, h0, std::min(H, h0 + rows_per_task),
                k);
        }
      }
      return;
    }
    const int64_t buffer_rows = rows_per_task + 2 * pad;
    // The input rows, then (for half types) the task's output rows in float; the pads are never written.
    const bool half = !std::is_same_v<scalar_t, float>;
    std::vector<float> storage(
        static_cast<size_t>(buffer_rows * padded + (half ? rows_per_task * W : 0) + kRowAlign), 0.0f);
    float* const buffer = reinterpret_cast<float*>(
        (reinterpret_cast<uintptr_t>(storage.data()) + kRowAlign * sizeof(float) - 1) & ~(kRowAlign * sizeof(float) - 1));
    float* tmp = buffer + buffer_rows * padded;
    for (int64_t begin; (begin = next_chunk.fetch_add(chunk)) < tasks;) {
      const int64_t end = std::min(tasks, begin + chunk);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t plane = task / blocks;
        const int64_t h0 = (task % blocks) * rows_per_task, h1 = std::min(H, h0 + rows_per_task);
        const scalar_t* src = in + plane * H * W;
        // Buffer row i holds input row h0 - pad + i (zeros outside the image).
        for (int64_t i = 0; i < h1 - h0 + 2 * pad; ++i) {
          const int64_t ih = h0 - pad + i;
          float* r = buffer + i * padded + pad;
          if (ih < 0 || ih >= H) {
            std::fill(r, r + W, 0.0f);
            continue;
          }
          const scalar_t* s = src + ih * W;
          if constexpr (std::is_same_v<scalar_t, float>) {
            std::memcpy(r, s, static_cast<size_t>(W) * sizeof(float));
          } else if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
            kernels.from_bf16(reinterpret_cast<const uint16_t*>(s), r, W);
          } else {
            for (int64_t w = 0; w < W; ++w) r[w] = static_cast<float>(s[w]);
          }
        }
        scalar_t* dst = out + (plane * H + h0) * W;
        const float* wk = weight + (plane % C) * k * k;
        float* result = tmp;  // float output goes straight to dst
        if constexpr (std::is_same_v<scalar_t, float>) result = dst;
        // The next task's input is fetched from memory while this one computes, a slice per chunk of rows.
        const char* next = nullptr;
        int64_t next_bytes = 0;
        if (task + 1 < end) {
          const int64_t np = (task + 1) / blocks, nh0 = ((task + 1) % blocks) * rows_per_task;
          const int64_t first = std::max<int64_t>(0, nh0 - pad), last = std::min(H, nh0 + rows_per_task + pad);
          next = reinterpret_cast<const char*>(in + (np * H + first) * W);
          next_bytes = (last - first) * W * static_cast<int64_t>(sizeof(scalar_t));
        }
        const int64_t n = h1 - h0;
        for (int64_t c = 0; c < n; c += kChunkRows) {
          const int64_t m = std::min(kChunkRows, n - c);
          if (next != nullptr) {
            for (int64_t b = (next_bytes * c / n) & ~int64_t{63}; b < next_bytes * (c + m) / n; b += 64) {
              __builtin_prefetch(next + b, 0, 2);
            }
          }
          kernels.rows(buffer + c * padded, padded, wk, result + c * W, m, W, k);
        }
        if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
          kernels.to_bf16(tmp, reinterpret_cast<uint16_t*>(dst), n * W);
        } else if constexpr (!std::is_same_v<scalar_t, float>) {
          for (int64_t i = 0; i < n * W; ++i) dst[i] = static_cast<scalar_t>(tmp[i]);
        }
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

TORCH_LIBRARY_IMPL(my_ops, CPU, m) { m.impl("depthwise_conv2d", &my_ops::depthwise_conv2d_cpu); }
