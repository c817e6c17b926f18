// pt2rt::depthwise_conv2d: a depthwise 2-d convolution (one filter per channel, no channel multiplier) of a float32
// image, channels-last in and out, with the weights as export_tools lays them out ([kh, kw, C]): oneDNN's own sets
// each call up anew, a large part of a call on the small images of MobileNets and EfficientNets.
// pt2rt::depthwise_conv2d_act: the same, then the activation that follows (pointwise.h's) on each finished row.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "depthwise.h"
#include "isa.h"
#include "pointwise.h"

namespace {

using pt2rt::kernels::DepthwiseRow;
using pt2rt::kernels::DepthwiseRowKernel;

// The widest rows this CPU runs, chosen once (isa.h).
DepthwiseRowKernel row_fn() {
  static const DepthwiseRowKernel fn = pt2rt::kernels::widest_isa(
      pt2rt::kernels::depthwise_row_baseline(), pt2rt::kernels::depthwise_row_avx2(),
      pt2rt::kernels::depthwise_row_avx512());
  return fn;
}

int64_t pair_at(const char* op, at::IntArrayRef v, const char* what, size_t i) {
  TORCH_CHECK(v.size() == 2, op, ": expected ", what, " as 2 values, got ", v.size());
  return v[i];
}

// Rows of output pixels per parallel piece: ~32K multiply-adds (a hand-off costs a few us).
constexpr int64_t kWorkPerPiece = int64_t{1} << 15;

at::Tensor depthwise(const char* op, const at::Tensor& x, const at::Tensor& weight,
                     const std::optional<at::Tensor>& bias_opt, at::IntArrayRef stride, at::IntArrayRef padding,
                     at::IntArrayRef dilation, int32_t activation) {
  TORCH_CHECK(weight.dim() == 3, op, ": expected weight [kh, kw, C], got ", weight.sizes());
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                  (!has_bias || bias_opt->scalar_type() == at::kFloat),
              op, ": expected float32 tensors, got ", x.scalar_type(), ", ", weight.scalar_type(),
              has_bias ? ", " : "", has_bias ? c10::toString(bias_opt->scalar_type()) : "");
  TORCH_CHECK(x.dim() == 4 && (!has_bias || bias_opt->dim() == 1), op,
              ": expected x [N, C, H, W], weight [kh, kw, C] and bias [C], got ", x.sizes(), ", ", weight.sizes(),
              " and ", has_bias ? bias_opt->sizes() : at::IntArrayRef{});
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), kh = weight.size(0),
                kw = weight.size(1);
  TORCH_CHECK(weight.size(2) == c && (!has_bias || bias_opt->size(0) == c), op, ": x has ", c, " channels, weight ",
              weight.size(2), " and bias ", has_bias ? bias_opt->size(0) : c);
  const int64_t sh = pair_at(op, stride, "stride", 0), sw = pair_at(op, stride, "stride", 1);
  const int64_t ph = pair_at(op, padding, "padding", 0), pw = pair_at(op, padding, "padding", 1);
  const int64_t dh = pair_at(op, dilation, "dilation", 0), dw = pair_at(op, dilation, "dilation", 1);
  TORCH_CHECK(sh > 0 && sw > 0 && dh > 0 && dw > 0 && ph >= 0 && pw >= 0 && kh > 0 && kw > 0, op,
              ": expected positive strides, dilations and kernel sizes and no negative padding, got stride ", stride,
              ", padding ", padding, ", dilation ", dilation, ", kernel ", kh, "x", kw);
  const int64_t span_h = h + 2 * ph - dh * (kh - 1) - 1, span_w = w + 2 * pw - dw * (kw - 1) - 1;
  TORCH_CHECK(span_h >= 0 && span_w >= 0, op, ": the ", kh, "x", kw, " kernel (dilation ", dilation,
              ") is larger than the padded input ", h, "x", w, " (padding ", padding, ")");
  const int64_t oh = span_h / sh + 1, ow = span_w / sw + 1;
  const at::Tensor in = x.contiguous(at::MemoryFormat::ChannelsLast);
  // no bias: the kernel's sums start from 0, the same bits as a zero bias
  const at::Tensor wk = weight.contiguous(), b = has_bias ? bias_opt->contiguous() : at::Tensor();
  at::Tensor out = at::empty({n, c, oh, ow}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  if (out.numel() == 0) return out;
  const float* ip = in.data_ptr<float>();
  const float *wp = wk.data_ptr<float>(), *bp = has_bias ? b.data_ptr<float>() : nullptr;
  float* op_ = out.data_ptr<float>();
  const DepthwiseRowKernel row = row_fn();
  const int64_t rows = n * oh, per_row = ow * c * kh * kw;
  const int64_t grain = std::max<int64_t>(1, kWorkPerPiece / std::max<int64_t>(1, per_row));
  // each output row is computed whole by one thread, in the same order at any thread count
  at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t img = r / oh, oy = r % oh;
      const DepthwiseRow args{ip + img * h * w * c, w * c, c, h, w, wp, bp, c, kh, kw, sh, sw, ph, pw, dh, dw,
                              op_ + (img * oh + oy) * ow * c, c, ow, activation};
      row(args, oy);
    }
  });
  return out;
}

at::Tensor depthwise_conv2d_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
  return depthwise("pt2rt::depthwise_conv2d", x, weight, bias, stride, padding, dilation,
                   pt2rt::kernels::kPointwiseNone);
}

at::Tensor depthwise_conv2d_act_cpu(const at::Tensor& x, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation, c10::string_view activation) {
  const int32_t act = pt2rt::kernels::pointwise_activation_code(std::string_view(activation.data(), activation.size()));
  TORCH_CHECK(act >= 0, "pt2rt::depthwise_conv2d_act: unknown activation '", activation, "', expected ",
              pt2rt::kernels::kPointwiseActivationNames);
  return depthwise("pt2rt::depthwise_conv2d_act", x, weight, bias, stride, padding, dilation, act);
}

}  // namespace

// The shape for tracing (a fake tensor, channels-last) is export_tools.convolutions' register_fake.
TORCH_LIBRARY_FRAGMENT(pt2rt, m) {
  m.def("depthwise_conv2d(Tensor x, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation) -> "
        "Tensor");
  // and the activation after the sum, in the same pass (a batch norm before it is folded into weight and bias)
  m.def("depthwise_conv2d_act(Tensor x, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, "
        "str activation) -> Tensor");
}
TORCH_LIBRARY_IMPL(pt2rt, CPU, m) {
  m.impl("depthwise_conv2d", &depthwise_conv2d_cpu);
  m.impl("depthwise_conv2d_act", &depthwise_conv2d_act_cpu);
}
