// Tensor bookkeeping for lite model libraries: the aoti_torch_* functions (renamed pt2rt_lite_aoti_torch_*) that
// create, view, describe and free tensors. Kernels are in ops.cpp.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "guard.h"
#include "tensor.h"
// ops' lite entries see these declarations: they must agree with the shim's (a conflict fails this compile)
#include <pt2rt/lite_op.h>

using namespace pt2rt::lite;

namespace {

std::vector<int64_t> vec(const int64_t* p, int64_t n) { return std::vector<int64_t>(p, p + n); }

std::atomic<bool> grad_mode{false};

}  // namespace

const char* pt2rt_lite_shim_last_error() { return last_error().c_str(); }
void pt2rt_lite_set_error(const char* message) {
  set_last_error(message != nullptr && *message != '\0' ? message : "an op's lite entry failed");
}
AOTITorchError pt2rt_lite_empty_like(AtenTensorHandle tensor, AtenTensorHandle* ret) {
  return guarded("empty_like", [&] {
    const ShimTensor& like = *as_tensor(tensor);
    *ret = as_handle(empty_strided(like.sizes, suggested_strides(like), like.dtype).release());
  });
}
// As at::parallel_for does with OpenMP: at most one part per thread, each of at least grain; inline when the caller
// is already one of a team's threads.
void pt2rt_lite_parallel_for(int64_t begin, int64_t end, int64_t grain, void (*fn)(void*, int64_t, int64_t),
                             void* context) {
  if (end <= begin || fn == nullptr) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (end - begin + grain - 1) / grain;
  const int64_t threads = omp_in_parallel() ? 1 : std::min<int64_t>(omp_get_max_threads(), chunks);
  if (threads <= 1) {
    fn(context, begin, end);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    const int64_t team = omp_get_num_threads();
    const int64_t part = (chunks + team - 1) / team * grain;
    const int64_t b = begin + omp_get_thread_num() * part;
    if (b < end) fn(context, b, std::min(end, b + part));
  }
}

int32_t pt2rt_lite_aoti_torch_device_type_cpu() { return kDeviceCpu; }
int32_t pt2rt_lite_aoti_torch_device_type_cuda() { return kDeviceCuda; }
int32_t pt2rt_lite_aoti_torch_layout_strided() { return 0; }
int32_t pt2rt_lite_aoti_torch_dtype_float32() { return kFloat32; }
int32_t pt2rt_lite_aoti_torch_dtype_float64() { return kFloat64; }
int32_t pt2rt_lite_aoti_torch_dtype_float16() { return kFloat16; }
int32_t pt2rt_lite_aoti_torch_dtype_bfloat16() { return kBFloat16; }
int32_t pt2rt_lite_aoti_torch_dtype_int64() { return kInt64; }
int32_t pt2rt_lite_aoti_torch_dtype_int32() { return kInt32; }
int32_t pt2rt_lite_aoti_torch_dtype_int16() { return kInt16; }
int32_t pt2rt_lite_aoti_torch_dtype_int8() { return kInt8; }
int32_t pt2rt_lite_aoti_torch_dtype_uint8() { return kUInt8; }
int32_t pt2rt_lite_aoti_torch_dtype_bool() { return kBool; }
// Lite runs inference only: the model library switches grad mode off around its run and back after.
bool pt2rt_lite_aoti_torch_grad_mode_is_enabled() { return grad_mode.load(std::memory_order_relaxed); }
void pt2rt_lite_aoti_torch_grad_mode_set_enabled(bool enabled) { grad_mode.store(enabled, std::memory_order_relaxed); }

AOTITorchError pt2rt_lite_aoti_torch_delete_tensor_object(AtenTensorHandle tensor) {
  return guarded("delete_tensor_object", [&] { delete as_tensor(tensor); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret) {
  return guarded("get_data_ptr", [&] { *ret = as_tensor(tensor)->data(); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_storage_size(AtenTensorHandle tensor, int64_t* ret) {
  return guarded("get_storage_size", [&] { *ret = static_cast<int64_t>(as_tensor(tensor)->storage->nbytes); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret) {
  return guarded("get_dim", [&] { *ret = as_tensor(tensor)->dim(); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_numel(AtenTensorHandle tensor, int64_t* ret) {
  return guarded("get_numel", [&] { *ret = as_tensor(tensor)->numel(); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret) {
  return guarded("get_sizes", [&] { *ret = as_tensor(tensor)->sizes.data(); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_size(AtenTensorHandle tensor, int64_t d, int64_t* ret) {
  return guarded("get_size", [&] { *ret = as_tensor(tensor)->sizes.at(static_cast<std::size_t>(d)); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret) {
  return guarded("get_strides", [&] { *ret = as_tensor(tensor)->strides.data(); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_stride(AtenTensorHandle tensor, int64_t d, int64_t* ret) {
  return guarded("get_stride", [&] { *ret = as_tensor(tensor)->strides.at(static_cast<std::size_t>(d)); });
}
AOTITorchError pt2rt_lite_aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret) {
  return guarded("get_dtype", [&] { *ret = as_tensor(tensor)->dtype; });
}
AOTITorchError pt2rt_lite_aoti_torch_get_device_type(AtenTensorHandle tensor, int32_t* ret) {
  return guarded("get_device_type", [&] { *ret = as_tensor(tensor)->device_type; });
}
AOTITorchError pt2rt_lite_aoti_torch_get_device_index(AtenTensorHandle, int32_t* ret) {
  return guarded("get_device_index", [&] { *ret = -1; });  // ATen's CPU tensors say -1 as well
}
AOTITorchError pt2rt_lite_aoti_torch_get_storage_offset(AtenTensorHandle tensor, int64_t* ret) {
  return guarded("get_storage_offset", [&] { *ret = as_tensor(tensor)->offset; });
}
AOTITorchError pt2rt_lite_aoti_torch_is_contiguous(AtenTensorHandle tensor, bool* ret) {
  return guarded("is_contiguous", [&] { *ret = as_tensor(tensor)->is_contiguous(); });
}
AOTITorchError pt2rt_lite_aoti_torch_is_defined(AtenTensorHandle tensor, bool* ret) {
  return guarded("is_defined", [&] { *ret = tensor != nullptr; });
}
AOTITorchError pt2rt_lite_aoti_torch_new_tensor_handle(AtenTensorHandle orig, AtenTensorHandle* ret) {
  return guarded("new_tensor_handle", [&] { *ret = as_handle(new ShimTensor(*as_tensor(orig))); });
}
AOTITorchError pt2rt_lite_aoti_torch__reinterpret_tensor(AtenTensorHandle self, int64_t ndim, const int64_t* sizes,
                                                         const int64_t* strides, int64_t storage_offset,
                                                         AtenTensorHandle* ret) {
  return guarded("_reinterpret_tensor", [&] {
    auto t = std::make_unique<ShimTensor>(*as_tensor(self));
    t->sizes = vec(sizes, ndim);
    t->strides = vec(strides, ndim);
    t->offset = storage_offset;
    *ret = as_handle(t.release());
  });
}
AOTITorchError pt2rt_lite_aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes, const int64_t* strides,
                                                   int32_t dtype, int32_t device_type, int32_t,
                                                   AtenTensorHandle* ret) {
  return guarded("empty_strided", [&] {
    if (device_type != kDeviceCpu) throw std::invalid_argument("lite runs on the CPU only");
    *ret = as_handle(empty_strided(vec(sizes, ndim), vec(strides, ndim), dtype).release());
  });
}
AOTITorchError pt2rt_lite_aoti_torch_create_tensor_from_blob(void* data, int64_t ndim, const int64_t* sizes,
                                                             const int64_t* strides, int64_t storage_offset,
                                                             int32_t dtype, int32_t device_type, int32_t,
                                                             AtenTensorHandle* ret) {
  return guarded("create_tensor_from_blob", [&] {
    if (device_type != kDeviceCpu) throw std::invalid_argument("lite runs on the CPU only");
    if (element_size(dtype) == 0) throw std::invalid_argument("dtype code " + std::to_string(dtype) + " is not one lite runs");
    auto t = std::make_unique<ShimTensor>();
    t->storage = std::make_shared<Storage>();
    t->storage->data = data;  // the blob's own extent is unknown: storage_size reports what the view spans
    t->dtype = dtype;
    t->sizes = vec(sizes, ndim);
    t->strides = vec(strides, ndim);
    t->offset = storage_offset;
    int64_t span = 1;
    for (int64_t d = 0; d < ndim; ++d) span = t->sizes[d] == 0 ? 0 : span;
    for (int64_t d = 0; d < ndim && span > 0; ++d) span += (t->sizes[d] - 1) * t->strides[d];
    t->storage->nbytes = static_cast<std::size_t>((storage_offset + span) * static_cast<int64_t>(element_size(dtype)));
    *ret = as_handle(t.release());
  });
}
AOTITorchError pt2rt_lite_aoti_torch_create_tensor_from_blob_v2(void* data, int64_t ndim, const int64_t* sizes,
                                                                const int64_t* strides, int64_t storage_offset,
                                                                int32_t dtype, int32_t device_type,
                                                                int32_t device_index, AtenTensorHandle* ret,
                                                                int32_t layout, const uint8_t*, int64_t) {
  if (layout != 0) {
    set_last_error("create_tensor_from_blob_v2: layout " + std::to_string(layout) + " (lite has strided tensors only)");
    return kShimFailure;
  }
  // the model library makes its constants with this function (and its inputs' wrappers with the other)
  const AOTITorchError status = pt2rt_lite_aoti_torch_create_tensor_from_blob(data, ndim, sizes, strides, storage_offset,
                                                                              dtype, device_type, device_index, ret);
  if (status == kShimSuccess) as_tensor(*ret)->storage->constant = true;
  return status;
}
AOTITorchError pt2rt_lite_aoti_torch_clone(AtenTensorHandle self, AtenTensorHandle* ret) {
  return guarded("clone", [&] {
    // ATen's clone keeps the memory format
    const ShimTensor& src = *as_tensor(self);
    auto t = empty_strided(src.sizes, suggested_strides(src), src.dtype);
    copy_strided(*t, src);
    *ret = as_handle(t.release());
  });
}
AOTITorchError pt2rt_lite_aoti_torch_clone_preserve_strides(AtenTensorHandle self, AtenTensorHandle* ret) {
  return guarded("clone_preserve_strides", [&] {
    const ShimTensor& src = *as_tensor(self);
    auto t = empty_strided(src.sizes, src.strides, src.dtype);
    copy_strided(*t, src);
    *ret = as_handle(t.release());
  });
}
AOTITorchError pt2rt_lite_aoti_torch_copy_(AtenTensorHandle self, AtenTensorHandle src, int32_t) {
  return guarded("copy_", [&] { copy_strided(*as_tensor(self), *as_tensor(src)); });
}
void pt2rt_lite_aoti_torch_check(bool cond, const char* func, const char* file, uint32_t line, const char* msg) {
  if (cond) return;
  std::string what = msg != nullptr && *msg != '\0' ? msg : "a check failed";
  what += std::string(" (in ") + (func != nullptr ? func : "?") + ", " + (file != nullptr ? file : "?") + ":" +
          std::to_string(line) + ")";
  set_last_error("the model's check failed: " + what);
  throw std::runtime_error(what);
}
