// The recurrence, the depthwise rows, the pointwise and linear kernels, the Winograd convolution and attention for
// any CPU (x86-64's SSE2, or the target's own vectors).
#include "rnn_impl.h"
#include "depthwise_impl.h"
#include "pointwise_impl.h"
#include "winograd_impl.h"
#include "attention_impl.h"

pt2rt::kernels::RnnStepsFn pt2rt::kernels::rnn_steps_baseline() { return &rnn_steps; }
pt2rt::kernels::DepthwiseRowKernel pt2rt::kernels::depthwise_row_baseline() { return &depthwise_row; }
pt2rt::kernels::PointwiseKernel pt2rt::kernels::pointwise_baseline() { return &pointwise; }
pt2rt::kernels::LinearKernel pt2rt::kernels::linear_baseline() { return &linear; }
pt2rt::kernels::WinogradTilesKernel pt2rt::kernels::winograd_baseline() { return &winograd_tiles; }
pt2rt::kernels::AttentionKernel pt2rt::kernels::attention_baseline() { return &attention; }
