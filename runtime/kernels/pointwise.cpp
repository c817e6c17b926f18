// pt2rt::pointwise_conv2d: a 1x1 convolution (stride 1, no padding, one group) of a float32 image, channels-last in
// and out, with the weight as export_tools lays it out ([C_in, C_out] padded to whole vectors) and the following
// activation applied before the output is stored: MKL's products, which ATen's 1x1 convolutions become, are slow on
// the few input channels of MobileNets and EfficientNets, and the activation would be another pass over the output.
// pt2rt::linear: a linear layer the same way, its weight in panels (pointwise.h's LinearRows): ATen's product goes
// to MKL's sgemm, which copies the weight into its own packed form on every call.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "isa.h"
#include "pointwise.h"

namespace {

using pt2rt::kernels::LinearKernel;
using pt2rt::kernels::LinearRows;
using pt2rt::kernels::PointwiseKernel;
using pt2rt::kernels::PointwiseRows;

PointwiseKernel kernel_fn() {
  static const PointwiseKernel fn = pt2rt::kernels::widest_isa(
      pt2rt::kernels::pointwise_baseline(), pt2rt::kernels::pointwise_avx2(), pt2rt::kernels::pointwise_avx512());
  return fn;
}

LinearKernel linear_fn() {
  static const LinearKernel fn = pt2rt::kernels::widest_isa(
      pt2rt::kernels::linear_baseline(), pt2rt::kernels::linear_avx2(), pt2rt::kernels::linear_avx512());
  return fn;
}

// The activation's code (pointwise.h) after checking it and the tensors' types: op's argument errors
int32_t checked_activation(const char* op, const at::Tensor& x, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias_opt, c10::string_view activation) {
  const int32_t act = pt2rt::kernels::pointwise_activation_code(std::string_view(activation.data(), activation.size()));
  TORCH_CHECK(act >= 0, op, ": unknown activation '", activation, "', expected ",
              pt2rt::kernels::kPointwiseActivationNames);
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                  (!has_bias || bias_opt->scalar_type() == at::kFloat),
              op, ": expected float32 tensors, got ", x.scalar_type(), ", ", weight.scalar_type(),
              has_bias ? ", " : "", has_bias ? c10::toString(bias_opt->scalar_type()) : "");
  return act;
}

// Pixels per parallel piece: ~64K multiply-adds (a hand-off costs a few us), a multiple of every tile's rows.
constexpr int64_t kWorkPerPiece = int64_t{1} << 16;
constexpr int64_t kRowsMultiple = 24;

at::Tensor pointwise_conv2d_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias_opt,
                                int64_t out_channels, c10::string_view activation) {
  constexpr const char* op = "pt2rt::pointwise_conv2d";
  const int32_t act = checked_activation(op, x, weight, bias_opt, activation);
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  TORCH_CHECK(x.dim() == 4 && weight.dim() == 2 && (!has_bias || bias_opt->dim() == 1), op,
              ": expected x [N, C_in, H, W], weight [C_in, C_out padded] and bias [C_out], got ", x.sizes(), ", ",
              weight.sizes(), " and ", has_bias ? bias_opt->sizes() : at::IntArrayRef{});
  const int64_t n = x.size(0), cin = x.size(1), h = x.size(2), w = x.size(3), ldw = weight.size(1);
  TORCH_CHECK(weight.size(0) == cin && out_channels > 0 && ldw >= out_channels &&
                  ldw % pt2rt::kernels::kPointwiseColumnAlign == 0 && (!has_bias || bias_opt->size(0) == out_channels),
              op, ": x has ", cin, " channels and ", out_channels, " come out; expected weight [", cin,
              ", a multiple of ", pt2rt::kernels::kPointwiseColumnAlign, " >= ", out_channels, "] and bias [",
              out_channels, "], got ", weight.sizes(), " and ", has_bias ? bias_opt->sizes() : at::IntArrayRef{});
  const at::Tensor in = x.contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor wk = weight.contiguous(), b = has_bias ? bias_opt->contiguous() : at::Tensor();
  at::Tensor out = at::empty({n, out_channels, h, w}, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  const int64_t rows = n * h * w;
  if (rows == 0) return out;
  const PointwiseKernel kernel = kernel_fn();
  const PointwiseRows whole{in.data_ptr<float>(), cin, cin, wk.data_ptr<float>(), ldw,
                            has_bias ? b.data_ptr<float>() : nullptr, out.data_ptr<float>(), out_channels, rows,
                            out_channels, act};
  int64_t grain = std::max<int64_t>(1, kWorkPerPiece / std::max<int64_t>(1, cin * out_channels));
  grain = (grain + kRowsMultiple - 1) / kRowsMultiple * kRowsMultiple;
  // each output row is computed whole by one thread, in the same order at any thread count
  at::parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    PointwiseRows part = whole;
    part.in += r0 * cin;
    part.out += r0 * out_channels;
    part.rows = r1 - r0;
    kernel(part);
  });
  return out;
}

at::Tensor linear_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias_opt,
                      int64_t out_features, c10::string_view activation) {
  constexpr const char* op = "pt2rt::linear";
  using pt2rt::kernels::kLinearPanel;
  const int32_t act = checked_activation(op, x, weight, bias_opt, activation);
  const bool has_bias = bias_opt.has_value() && bias_opt->defined();
  TORCH_CHECK(out_features > 0, op, ": expected out_features > 0, got ", out_features);
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 3 && (!has_bias || bias_opt->dim() == 1), op,
              ": expected x [..., in], weight [panels, in, ", kLinearPanel, "] and bias [out], got ", x.sizes(), ", ",
              weight.sizes(), " and ", has_bias ? bias_opt->sizes() : at::IntArrayRef{});
  const int64_t k = x.size(-1), panels = (out_features + kLinearPanel - 1) / kLinearPanel;
  TORCH_CHECK(weight.size(0) == panels && weight.size(1) == k && weight.size(2) == kLinearPanel &&
                  (!has_bias || bias_opt->size(0) == out_features),
              op, ": x has ", k, " features and ", out_features, " come out; expected weight [", panels, ", ", k, ", ",
              kLinearPanel, "] and bias [", out_features, "], got ", weight.sizes(), " and ",
              has_bias ? bias_opt->sizes() : at::IntArrayRef{});
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  at::Tensor in = x.reshape({rows, k});
  if (in.stride(1) != 1 || (in.size(0) > 1 && in.stride(0) < k)) in = in.contiguous();
  const at::Tensor wk = weight.contiguous(), b = has_bias ? bias_opt->contiguous() : at::Tensor();
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = out_features;
  at::Tensor out = at::empty(sizes, x.options().memory_format(at::MemoryFormat::Contiguous));
  if (rows == 0) return out;
  const LinearKernel kernel = linear_fn();
  const LinearRows whole{in.data_ptr<float>(), rows > 1 ? in.stride(0) : k, k, wk.data_ptr<float>(),
                         has_bias ? b.data_ptr<float>() : nullptr, out.data_ptr<float>(), out_features, rows,
                         out_features, act};
  const int64_t threads = rows * k * out_features >= 2 * kWorkPerPiece ? at::get_num_threads() : 1;
  const pt2rt::kernels::LinearPieces cut = pt2rt::kernels::linear_pieces(whole, threads);
  at::parallel_for(0, cut.pieces, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) kernel(pt2rt::kernels::linear_piece(whole, cut, p));
  });
  return out;
}

}  // namespace

// The shape for tracing (a fake tensor, channels-last) is export_tools.convolutions' register_fake.
TORCH_LIBRARY_FRAGMENT(pt2rt, m) {
  m.def("pointwise_conv2d(Tensor x, Tensor weight, Tensor? bias, int out_channels, str activation) -> Tensor");
  m.def("linear(Tensor x, Tensor weight, Tensor? bias, int out_features, str activation) -> Tensor");
}
TORCH_LIBRARY_IMPL(pt2rt, CPU, m) {
  m.impl("pointwise_conv2d", &pointwise_conv2d_cpu);
  m.impl("linear", &linear_cpu);
}
