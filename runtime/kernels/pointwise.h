// Pointwise (1x1) convolutions over channels-last images (libpt2rt_kernels.so's pt2rt::pointwise_conv2d, and lite's):
// the pixels' channel rows times a [C_in, C_out] weight, the bias and the activation after it applied to each tile
// in registers before it is stored. Pure float code without torch headers, compiled once per ISA and chosen at run
// time.
#pragma once

#include <cstdint>
#include <string_view>

namespace pt2rt::kernels {

// What follows the product in the same pass; each as eager computes it, NaN kept: relu max(y, 0), relu6 and
// hardtanh(0, 6) min(max(y, 0), 6), hardswish y * min(max(y + 3, 0), 6) / 6, hardsigmoid min(max(y + 3, 0), 6) / 6,
// silu y / (1 + e^-y), sigmoid 1 / (1 + e^-y), gelu y / 2 (1 + erf(y / sqrt(2))) with eager's erf (Abramowitz and
// Stegun 7.1.26, within 1.5e-7 of erf: eager's CPU GELU computes it so).
enum PointwiseActivation : int32_t {
  kPointwiseNone = 0,
  kPointwiseRelu = 1,
  kPointwiseRelu6 = 2,
  kPointwiseHardswish = 3,
  kPointwiseHardsigmoid = 4,
  kPointwiseSilu = 5,
  kPointwiseSigmoid = 6,
  kPointwiseGelu = 7,
};

// pt2rt::pointwise_conv2d's activation argument: its code, -1 for a name not in kPointwiseActivationNames
constexpr const char* kPointwiseActivationNames =
    "none, relu, relu6, hardswish, hardsigmoid, silu, sigmoid or gelu";
inline int32_t pointwise_activation_code(std::string_view name) {
  constexpr std::string_view names[] = {"none", "relu", "relu6", "hardswish", "hardsigmoid", "silu", "sigmoid", "gelu"};
  for (int32_t i = 0; i < static_cast<int32_t>(sizeof names / sizeof names[0]); ++i)
    if (name == names[i]) return i;
  return -1;
}

// out[r * out_rs + j] = act(bias[j] + sum over p < k in p order of in[r * in_rs + p] * weight[p * ldw + j]) for
// r < rows, j < cols. ldw is a multiple of 16, at least cols, and the weight's columns from cols to ldw are zeros
// (whole vectors are read there); bias: cols floats, or null for none.
struct PointwiseRows {
  const float* in;
  int64_t in_rs, k;
  const float* weight;
  int64_t ldw;
  const float* bias;
  float* out;
  int64_t out_rs, rows, cols;
  int32_t activation;
};
using PointwiseKernel = void (*)(const PointwiseRows& args);

// columns a weight row is padded to (the widest vector of any build)
constexpr int64_t kPointwiseColumnAlign = 16;

PointwiseKernel pointwise_baseline();
// null when the library was built without them (not x86-64)
PointwiseKernel pointwise_avx2();
PointwiseKernel pointwise_avx512();

// pt2rt::linear: out[r * out_rs + j] = act(bias[j] + sum over p < k in p order of in[r * in_rs + p] * w[p][j]) for
// r < rows, j < cols, with the weight in panels of kLinearPanel columns - panel q holds w[p][16 q .. 16 q + 15] for
// p < k, k rows of 16 floats one after another, zeros past cols - so a tile's weight is one stream whatever the
// weight's width (a [k, cols] matrix's rows would be a page apart on wide layers).
constexpr int64_t kLinearPanel = 16;
struct LinearRows {
  const float* in;
  int64_t in_rs, k;
  const float* weight;  // ceil(cols / 16) panels of [k][16]
  const float* bias;
  float* out;
  int64_t out_rs, rows, cols;
  int32_t activation;
};
using LinearKernel = void (*)(const LinearRows& args);

// How pt2rt::linear's callers (the torch op, lite) cut a call for `threads`: whole panels where each thread gets 4 or
// more and the rows are fewer than twice the columns (each thread reads half the weight and all the rows), else rows
// in multiples of 6, every tile's rows (each reads its rows - those the op before, cut by rows too, likely left in
// its core's caches - and all the weight: ViT-Tiny's layers at batch 8, 1576 rows x 192-768 columns, took 0.94x the
// time so on two threads); piece p of pieces. Each output is computed whole by one piece, in the same order at any
// thread count.
struct LinearPieces {
  bool by_panels;
  int64_t units, piece, pieces;
};
inline LinearPieces linear_pieces(const LinearRows& whole, int64_t threads) {
  const int64_t panels = (whole.cols + kLinearPanel - 1) / kLinearPanel;
  const bool by_panels = panels >= 4 * threads && whole.rows < 2 * whole.cols;
  const int64_t units = by_panels ? panels : whole.rows;
  int64_t piece = (units + threads - 1) / threads;
  if (!by_panels) piece = (piece + 5) / 6 * 6;
  return {by_panels, units, piece, (units + piece - 1) / piece};
}
inline LinearRows linear_piece(const LinearRows& whole, const LinearPieces& cut, int64_t p) {
  LinearRows part = whole;
  const int64_t u0 = p * cut.piece, u1 = u0 + cut.piece < cut.units ? u0 + cut.piece : cut.units;
  if (cut.by_panels) {
    const int64_t c0 = u0 * kLinearPanel;
    part.weight += u0 * whole.k * kLinearPanel;
    if (part.bias != nullptr) part.bias += c0;
    part.out += c0;
    part.cols = (whole.cols < u1 * kLinearPanel ? whole.cols : u1 * kLinearPanel) - c0;
  } else {
    part.in += u0 * whole.in_rs;
    part.out += u0 * whole.out_rs;
    part.rows = u1 - u0;
  }
  return part;
}
LinearKernel linear_baseline();
LinearKernel linear_avx2();
LinearKernel linear_avx512();

}  // namespace pt2rt::kernels
