// The C functions a lite model library calls (AOTInductor's aoti_torch_* shim, renamed pt2rt_lite_aoti_torch_* by
// the exporter so that lite and libtorch can share a process). Declared here without torch's headers; the
// exporter's test compiles torch's declarations against these (tests/python/test_lite.py).
#pragma once

#include <cstdint>

#define PT2RT_LITE_SHIM extern "C" __attribute__((visibility("default")))

struct AtenTensorOpaque;
using AtenTensorHandle = AtenTensorOpaque*;
using AOTITorchError = int32_t;
constexpr AOTITorchError kShimSuccess = 0;
constexpr AOTITorchError kShimFailure = 1;

// What the calling thread's last failed shim call said (the model library sees only the error code).
PT2RT_LITE_SHIM const char* pt2rt_lite_shim_last_error();
// For ops' lite entries (pt2rt/lite_op.h, which declares them too): the message of a failing op, and a parallel
// loop on the caller's threads.
PT2RT_LITE_SHIM void pt2rt_lite_set_error(const char* message);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_empty_like(AtenTensorHandle tensor, AtenTensorHandle* ret);
PT2RT_LITE_SHIM void pt2rt_lite_parallel_for(int64_t begin, int64_t end, int64_t grain,
                                             void (*fn)(void* context, int64_t begin, int64_t end), void* context);

// Bookkeeping
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_device_type_cpu();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_device_type_cuda();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_layout_strided();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_float32();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_float64();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_float16();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_bfloat16();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_int64();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_int32();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_int16();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_int8();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_uint8();
PT2RT_LITE_SHIM int32_t pt2rt_lite_aoti_torch_dtype_bool();
PT2RT_LITE_SHIM bool pt2rt_lite_aoti_torch_grad_mode_is_enabled();
PT2RT_LITE_SHIM void pt2rt_lite_aoti_torch_grad_mode_set_enabled(bool enabled);

PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_delete_tensor_object(AtenTensorHandle tensor);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_storage_size(AtenTensorHandle tensor, int64_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_size(AtenTensorHandle tensor, int64_t d, int64_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_stride(AtenTensorHandle tensor, int64_t d, int64_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_device_type(AtenTensorHandle tensor, int32_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_device_index(AtenTensorHandle tensor, int32_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_get_storage_offset(AtenTensorHandle tensor, int64_t* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_is_contiguous(AtenTensorHandle tensor, bool* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_is_defined(AtenTensorHandle tensor, bool* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_new_tensor_handle(AtenTensorHandle orig, AtenTensorHandle* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch__reinterpret_tensor(AtenTensorHandle self, int64_t ndim,
                                                                         const int64_t* sizes, const int64_t* strides,
                                                                         int64_t storage_offset, AtenTensorHandle* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes,
                                                                   const int64_t* strides, int32_t dtype,
                                                                   int32_t device_type, int32_t device_index,
                                                                   AtenTensorHandle* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_create_tensor_from_blob(void* data, int64_t ndim,
                                                                             const int64_t* sizes,
                                                                             const int64_t* strides,
                                                                             int64_t storage_offset, int32_t dtype,
                                                                             int32_t device_type,
                                                                             int32_t device_index,
                                                                             AtenTensorHandle* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_create_tensor_from_blob_v2(
    void* data, int64_t ndim, const int64_t* sizes, const int64_t* strides, int64_t storage_offset, int32_t dtype,
    int32_t device_type, int32_t device_index, AtenTensorHandle* ret, int32_t layout, const uint8_t* opaque_metadata,
    int64_t opaque_metadata_size);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_clone_preserve_strides(AtenTensorHandle self,
                                                                            AtenTensorHandle* ret);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_copy_(AtenTensorHandle self, AtenTensorHandle src,
                                                           int32_t non_blocking);
// The model's own checks (AOTI_TORCH_CHECK: an index in bounds): throws, with the message kept in last_error(),
// into the model container, which returns a failure.
PT2RT_LITE_SHIM void pt2rt_lite_aoti_torch_check(bool cond, const char* func, const char* file, uint32_t line,
                                                 const char* msg);

// Kernels (ops.cpp)
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_addmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                                   AtenTensorHandle mat1, AtenTensorHandle mat2,
                                                                   double beta, double alpha);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_mm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                                AtenTensorHandle mat2);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_bmm_out(AtenTensorHandle out, AtenTensorHandle self,
                                                                 AtenTensorHandle mat2);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_convolution(
    AtenTensorHandle input, AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride,
    int64_t stride_len, const int64_t* padding, int64_t padding_len, const int64_t* dilation, int64_t dilation_len,
    int32_t transposed, const int64_t* output_padding, int64_t output_padding_len, int64_t groups,
    AtenTensorHandle* ret0);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu(
    AtenTensorHandle query, AtenTensorHandle key, AtenTensorHandle value, double dropout_p, int32_t is_causal,
    AtenTensorHandle* attn_mask, double* scale, AtenTensorHandle* ret0, AtenTensorHandle* ret1);

// The recurrent layers export_tools.recurrent makes (pt2rt::rnn_layer, pt2rt::lstm_layer; rnn.cpp): what the
// generated code calls in their place (export_tools.lite.BUILTIN_OPS declares them to inductor)
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_rnn_layer(AtenTensorHandle gi, AtenTensorHandle h0,
                                                                   const AtenTensorHandle* whh_t, int64_t whh_t_len,
                                                                   const AtenTensorHandle* bhh, int64_t bhh_len,
                                                                   const char* mode, int32_t batch_first,
                                                                   AtenTensorHandle* ret0, AtenTensorHandle* ret1);
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_lstm_layer(AtenTensorHandle gi, AtenTensorHandle h0,
                                                                    AtenTensorHandle c0,
                                                                    const AtenTensorHandle* whh_t, int64_t whh_t_len,
                                                                    const AtenTensorHandle* bhh, int64_t bhh_len,
                                                                    int32_t batch_first, AtenTensorHandle* ret0,
                                                                    AtenTensorHandle* ret1, AtenTensorHandle* ret2);
// pt2rt::depthwise_conv2d (export_tools.convolutions; ops.cpp): channels-last out
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_depthwise_conv2d(
    AtenTensorHandle x, AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride, int64_t stride_len,
    const int64_t* padding, int64_t padding_len, const int64_t* dilation, int64_t dilation_len,
    AtenTensorHandle* ret0);
// pt2rt::depthwise_conv2d_act: the same with the activation after the sum (a pointwise.h name)
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_depthwise_conv2d_act(
    AtenTensorHandle x, AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride, int64_t stride_len,
    const int64_t* padding, int64_t padding_len, const int64_t* dilation, int64_t dilation_len,
    const char* activation, AtenTensorHandle* ret0);
// pt2rt::pointwise_conv2d (export_tools.convolutions; ops.cpp): channels-last out
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_pointwise_conv2d(AtenTensorHandle x, AtenTensorHandle weight,
                                                                          AtenTensorHandle* bias, int64_t out_channels,
                                                                          const char* activation,
                                                                          AtenTensorHandle* ret0);
// pt2rt::linear (export_tools.linear; ops.cpp): [..., out], contiguous
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_linear(AtenTensorHandle x, AtenTensorHandle weight,
                                                                AtenTensorHandle* bias, int64_t out_features,
                                                                const char* activation, AtenTensorHandle* ret0);
// pt2rt::winograd_conv2d (export_tools.convolutions; ops.cpp): channels-last out
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_winograd_conv2d(
    AtenTensorHandle x, AtenTensorHandle weight, AtenTensorHandle taps, AtenTensorHandle* bias, int64_t out_channels,
    const int64_t* padding, int64_t padding_len, const char* activation, AtenTensorHandle* ret0);
// pt2rt::attention (export_tools.attention; ops.cpp): [B, H, L_q, D_v] out, [B, L_q, H, D_v] in memory
PT2RT_LITE_SHIM AOTITorchError pt2rt_lite_aoti_torch_cpu_attention(AtenTensorHandle q, AtenTensorHandle k,
                                                                   AtenTensorHandle v, double scale,
                                                                   AtenTensorHandle* ret0);

// Every shim function by name (what export_tools.lite.SHIM_FUNCTIONS lists): runtime.cpp keeps them all in a static
// link, where nothing else in the program calls them but the model library does, by name.
#define PT2RT_LITE_SHIM_FUNCTIONS(X) \
  X(aoti_torch_device_type_cpu) \
  X(aoti_torch_device_type_cuda) \
  X(aoti_torch_layout_strided) \
  X(aoti_torch_dtype_float32) \
  X(aoti_torch_dtype_float64) \
  X(aoti_torch_dtype_float16) \
  X(aoti_torch_dtype_bfloat16) \
  X(aoti_torch_dtype_int64) \
  X(aoti_torch_dtype_int32) \
  X(aoti_torch_dtype_int16) \
  X(aoti_torch_dtype_int8) \
  X(aoti_torch_dtype_uint8) \
  X(aoti_torch_dtype_bool) \
  X(aoti_torch_grad_mode_is_enabled) \
  X(aoti_torch_grad_mode_set_enabled) \
  X(aoti_torch_delete_tensor_object) \
  X(aoti_torch_get_data_ptr) \
  X(aoti_torch_get_storage_size) \
  X(aoti_torch_get_dim) \
  X(aoti_torch_get_numel) \
  X(aoti_torch_get_sizes) \
  X(aoti_torch_get_size) \
  X(aoti_torch_get_strides) \
  X(aoti_torch_get_stride) \
  X(aoti_torch_get_dtype) \
  X(aoti_torch_get_device_type) \
  X(aoti_torch_get_device_index) \
  X(aoti_torch_get_storage_offset) \
  X(aoti_torch_is_contiguous) \
  X(aoti_torch_is_defined) \
  X(aoti_torch_new_tensor_handle) \
  X(aoti_torch__reinterpret_tensor) \
  X(aoti_torch_empty_strided) \
  X(aoti_torch_create_tensor_from_blob) \
  X(aoti_torch_create_tensor_from_blob_v2) \
  X(aoti_torch_clone) \
  X(aoti_torch_clone_preserve_strides) \
  X(aoti_torch_copy_) \
  X(aoti_torch_check) \
  X(aoti_torch_cpu_addmm_out) \
  X(aoti_torch_cpu_mm_out) \
  X(aoti_torch_cpu_bmm_out) \
  X(aoti_torch_cpu_convolution) \
  X(aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu) \
  X(aoti_torch_cpu_rnn_layer) \
  X(aoti_torch_cpu_lstm_layer) \
  X(aoti_torch_cpu_depthwise_conv2d) \
  X(aoti_torch_cpu_depthwise_conv2d_act) \
  X(aoti_torch_cpu_pointwise_conv2d) \
  X(aoti_torch_cpu_linear) \
  X(aoti_torch_cpu_winograd_conv2d) \
  X(aoti_torch_cpu_attention)
