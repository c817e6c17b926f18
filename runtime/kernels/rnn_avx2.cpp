// The recurrence, the depthwise rows, the pointwise and linear kernels, the Winograd convolution and attention
// compiled for AVX2 + FMA (CMake adds the flags to this file only).
#include "attention.h"
#include "depthwise.h"
#include "pointwise.h"
#include "rnn_kernel.h"
#include "winograd.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "rnn_impl.h"
#include "depthwise_impl.h"
#include "pointwise_impl.h"
#include "winograd_impl.h"
#include "attention_impl.h"
pt2rt::kernels::RnnStepsFn pt2rt::kernels::rnn_steps_avx2() { return &rnn_steps; }
pt2rt::kernels::DepthwiseRowKernel pt2rt::kernels::depthwise_row_avx2() { return &depthwise_row; }
pt2rt::kernels::PointwiseKernel pt2rt::kernels::pointwise_avx2() { return &pointwise; }
pt2rt::kernels::LinearKernel pt2rt::kernels::linear_avx2() { return &linear; }
pt2rt::kernels::WinogradTilesKernel pt2rt::kernels::winograd_avx2() { return &winograd_tiles; }
pt2rt::kernels::AttentionKernel pt2rt::kernels::attention_avx2() { return &attention; }
#else
pt2rt::kernels::RnnStepsFn pt2rt::kernels::rnn_steps_avx2() { return nullptr; }
pt2rt::kernels::DepthwiseRowKernel pt2rt::kernels::depthwise_row_avx2() { return nullptr; }
pt2rt::kernels::PointwiseKernel pt2rt::kernels::pointwise_avx2() { return nullptr; }
pt2rt::kernels::LinearKernel pt2rt::kernels::linear_avx2() { return nullptr; }
pt2rt::kernels::WinogradTilesKernel pt2rt::kernels::winograd_avx2() { return nullptr; }
pt2rt::kernels::AttentionKernel pt2rt::kernels::attention_avx2() { return nullptr; }
#endif
