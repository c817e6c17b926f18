// The recurrence compiled for AVX2 + FMA (CMake adds the flags to this file only).
#include "rnn_kernel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "rnn_impl.h"
pt2rt::kernels::RnnStepsFn pt2rt::kernels::rnn_steps_avx2() { return &rnn_steps; }
#else
pt2rt::kernels::RnnStepsFn pt2rt::kernels::rnn_steps_avx2() { return nullptr; }
#endif
