// pt2rt::winograd_conv2d: a 3x3 convolution (stride 1, no dilation, one group) of a float32 image by Winograd's
// F(2x2, 3x3) (winograd.h), channels-last in and out, with the weights as export_tools lays them out and the following
// activation applied before the output is stored: 16 multiply-adds per input channel for 4 outputs where oneDNN's
// direct convolution does 36.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "isa.h"
#include "pointwise.h"
#include "winograd.h"

namespace {

using pt2rt::kernels::WinogradConv;
using pt2rt::kernels::WinogradTilesKernel;

WinogradTilesKernel kernel_fn() {
  static const WinogradTilesKernel fn = pt2rt::kernels::widest_isa(
      pt2rt::kernels::winograd_baseline(), pt2rt::kernels::winograd_avx2(), pt2rt::kernels::winograd_avx512());
  return fn;
}

at::Tensor winograd_conv2d_cpu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& taps,
                               const std::optional<at::Tensor>& bias_opt, int64_t out_channels,
                               at::IntArrayRef padding, c10::string_view activation) {
  constexpr const char* op = "pt2rt::winograd_conv2d";
  const int32_t act = pt2rt::kernels::pointwise_activation_code(std::string_view(activation.data(), activation.size()));
  TORCH_CHECK(act >= 0, op, ": unknown activation '", activation, "', expected ",
              pt2rt::kernels::kPointwiseActivationNames);
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                  taps.scalar_type() == at::kFloat && (!has_bias || bias_opt->scalar_type() == at::kFloat),
              op, ": expected float32 tensors, got ", x.scalar_type(), ", ", weight.scalar_type(), ", ",
              taps.scalar_type(), has_bias ? ", " : "", has_bias ? c10::toString(bias_opt->scalar_type()) : "");
  TORCH_CHECK(padding.size() == 2 && padding[0] >= 0 && padding[1] >= 0, op,
              ": expected padding of two sizes >= 0, got ", padding);
  TORCH_CHECK(x.dim() == 4, op, ": expected x [N, C_in, H, W], got ", x.sizes());
  const int64_t n = x.size(0), cin = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = h + 2 * padding[0] - 2, ow = w + 2 * padding[1] - 2;
  TORCH_CHECK(oh > 0 && ow > 0, op, ": a ", h, "x", w, " image padded by ", padding,
              " is smaller than the 3x3 kernel");
  const int64_t ldw = weight.dim() == 3 ? weight.size(2) : -1;
  TORCH_CHECK(weight.dim() == 3 && weight.size(0) == 16 && weight.size(1) == cin && out_channels > 0 &&
                  ldw >= out_channels && ldw % pt2rt::kernels::kPointwiseColumnAlign == 0 && taps.dim() == 4 &&
                  taps.sizes() == at::IntArrayRef({3, 3, cin, ldw}) &&
                  (!has_bias || (bias_opt->dim() == 1 && bias_opt->size(0) == out_channels)),
              op, ": x has ", cin, " channels and ", out_channels, " come out; expected weight [16, ", cin,
              ", L], taps [3, 3, ", cin, ", L] (L a multiple of ", pt2rt::kernels::kPointwiseColumnAlign, " >= ",
              out_channels, ") and bias [", out_channels, "], got ", weight.sizes(), ", ", taps.sizes(), " and ",
              has_bias ? bias_opt->sizes() : at::IntArrayRef{});
  const at::Tensor in = x.contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor wk = weight.contiguous(), tk = taps.contiguous(),
                   b = has_bias ? bias_opt->contiguous() : at::Tensor();
  at::Tensor out = at::empty({n, out_channels, oh, ow}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  const WinogradConv conv{in.data_ptr<float>(), n, h, w, cin, wk.data_ptr<float>(), tk.data_ptr<float>(), ldw,
                          has_bias ? b.data_ptr<float>() : nullptr, out.data_ptr<float>(), oh, ow, out_channels,
                          padding[0], padding[1], act};
  const int64_t tiles = pt2rt::kernels::winograd_tile_count(conv);
  if (tiles == 0) return out;
  const int64_t per_call = pt2rt::kernels::winograd_tiles_per_call(tiles, at::get_num_threads());
  const int64_t calls = (tiles + per_call - 1) / per_call;
  const WinogradTilesKernel kernel = kernel_fn();
  // each output the same in any call, at any thread count
  at::parallel_for(0, calls, 1, [&](int64_t c0, int64_t c1) {
    std::vector<float> scratch(static_cast<size_t>(pt2rt::kernels::winograd_scratch_floats(conv, per_call)));
    for (int64_t c = c0; c < c1; ++c) kernel(conv, c * per_call, std::min(tiles, (c + 1) * per_call), scratch.data());
  });
  return out;
}

}  // namespace

// The shape for tracing (a fake tensor, channels-last) is export_tools.convolutions' register_fake.
TORCH_LIBRARY_FRAGMENT(pt2rt, m) {
  m.def("winograd_conv2d(Tensor x, Tensor weight, Tensor taps, Tensor? bias, int out_channels, int[] padding, "
        "str activation) -> Tensor");
}
TORCH_LIBRARY_IMPL(pt2rt, CPU, m) { m.impl("winograd_conv2d", &winograd_conv2d_cpu); }
