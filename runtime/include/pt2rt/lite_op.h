// An op's lite entry: the C function a lite model library calls in place of a custom op (docs/lite.md, "Your own
// ops"). No torch header, no libtorch: an ops library's lite build (lib<name>_lite.so) includes this and calls the
// lite runtime's functions declared here, which the runtime that loads it provides.
//
//   PT2RT_LITE_OP_SCHEMA(acme, scale2, "acme::scale2(Tensor x) -> Tensor");
//   PT2RT_LITE_OP(acme, scale2)(AtenTensorHandle x, AtenTensorHandle* ret0) {
//     return pt2rt::lite_op::guarded("acme::scale2", [&] {
//       pt2rt::lite_op::TensorRef in(x);
//       pt2rt::lite_op::Tensor out = pt2rt::lite_op::Tensor::empty_like(in);
//       ... the kernel, shared with the full ops library ...
//       *ret0 = out.release();
//     });
//   }
//
// The arguments follow the op's schema, as export_tools.lite.c_declaration writes them: Tensor -> AtenTensorHandle,
// Tensor? -> AtenTensorHandle* (NULL: None), Tensor[] -> const AtenTensorHandle*, int64_t length, int -> int64_t,
// int? -> int64_t*, int[] -> const int64_t*, int64_t length, float -> double, float? -> double*, bool -> int32_t,
// str -> const char*; then one AtenTensorHandle* per returned tensor, which the function fills with a tensor it
// made (the caller frees it). Zero: success; non-zero: failure, with pt2rt_lite_set_error's message.
// PT2RT_LITE_OP_SCHEMA states the schema the entry was written for, as torch prints it (str(op._schema)): export
// and the lite runtime refuse an entry whose schema is not the package's (a stale lite build would be called with
// the wrong arguments).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

struct AtenTensorOpaque;
using AtenTensorHandle = AtenTensorOpaque*;
using AOTITorchError = int32_t;

// The name the exporter binds NS::OP to (export_tools.lite.op_symbol): pt2rt_op_<NS>_<OP>
#define PT2RT_LITE_OP(ns, op) extern "C" __attribute__((visibility("default"))) AOTITorchError pt2rt_op_##ns##_##op
// ... and its schema: pt2rt_op_<NS>_<OP>_schema
#define PT2RT_LITE_OP_SCHEMA(ns, op, schema) \
  extern "C" __attribute__((visibility("default"))) const char pt2rt_op_##ns##_##op##_schema[] = schema

extern "C" {
// The lite runtime's (libpt2rt.so of dist-lite): tensors as the model library sees them.
AOTITorchError pt2rt_lite_aoti_torch_get_data_ptr(AtenTensorHandle tensor, void** ret);
AOTITorchError pt2rt_lite_aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret);
AOTITorchError pt2rt_lite_aoti_torch_get_sizes(AtenTensorHandle tensor, int64_t** ret);
AOTITorchError pt2rt_lite_aoti_torch_get_strides(AtenTensorHandle tensor, int64_t** ret);
AOTITorchError pt2rt_lite_aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret);
AOTITorchError pt2rt_lite_aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes, const int64_t* strides,
                                                   int32_t dtype, int32_t device_type, int32_t device_index,
                                                   AtenTensorHandle* ret);
AOTITorchError pt2rt_lite_aoti_torch_delete_tensor_object(AtenTensorHandle tensor);
// Every element of src into self (the same sizes and dtype, any strides on either side).
AOTITorchError pt2rt_lite_aoti_torch_copy_(AtenTensorHandle self, AtenTensorHandle src, int32_t non_blocking);
// A new tensor laid out as torch.empty_like(tensor) lays it out: tensor's strides when it is dense, else
// channels-last or contiguous (its suggested memory format).
AOTITorchError pt2rt_lite_empty_like(AtenTensorHandle tensor, AtenTensorHandle* ret);
// The message the run fails with when the op returns non-zero.
void pt2rt_lite_set_error(const char* message);
// fn(context, begin, end) over [begin, end) in chunks of at least grain, on the runtime's threads (as many as the
// caller's run may use; one when already inside a parallel region).
void pt2rt_lite_parallel_for(int64_t begin, int64_t end, int64_t grain,
                             void (*fn)(void* context, int64_t begin, int64_t end), void* context);
}

namespace pt2rt::lite_op {

// c10::ScalarType's codes, as the model library passes them
enum class Dtype : int32_t {
  UInt8 = 0, Int8 = 1, Int16 = 2, Int32 = 3, Int64 = 4, Float16 = 5, Float32 = 6, Float64 = 7, Bool = 11,
  BFloat16 = 15,
};

inline std::size_t element_size(Dtype d) {
  switch (d) {
    case Dtype::UInt8: case Dtype::Int8: case Dtype::Bool: return 1;
    case Dtype::Int16: case Dtype::Float16: case Dtype::BFloat16: return 2;
    case Dtype::Int32: case Dtype::Float32: return 4;
    case Dtype::Int64: case Dtype::Float64: return 8;
  }
  return 0;
}

inline const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::UInt8: return "uint8";
    case Dtype::Int8: return "int8";
    case Dtype::Int16: return "int16";
    case Dtype::Int32: return "int32";
    case Dtype::Int64: return "int64";
    case Dtype::Float16: return "float16";
    case Dtype::Float32: return "float32";
    case Dtype::Float64: return "float64";
    case Dtype::Bool: return "bool";
    case Dtype::BFloat16: return "bfloat16";
  }
  return "unknown";
}

inline void check(AOTITorchError code, const char* what) {
  if (code != 0) throw std::runtime_error(std::string("the lite runtime's ") + what + " failed");
}

// A tensor the op was given (not owned): data, sizes and strides in elements.
class TensorRef {
 public:
  explicit TensorRef(AtenTensorHandle h) : handle_(h) {
    if (h == nullptr) throw std::invalid_argument("expected a tensor, got none");
    int64_t dim = 0;
    int32_t dtype = 0;
    check(pt2rt_lite_aoti_torch_get_dim(h, &dim), "get_dim");
    check(pt2rt_lite_aoti_torch_get_sizes(h, &sizes_), "get_sizes");
    check(pt2rt_lite_aoti_torch_get_strides(h, &strides_), "get_strides");
    check(pt2rt_lite_aoti_torch_get_dtype(h, &dtype), "get_dtype");
    check(pt2rt_lite_aoti_torch_get_data_ptr(h, &data_), "get_data_ptr");
    dim_ = dim;
    dtype_ = static_cast<Dtype>(dtype);
  }
  AtenTensorHandle handle() const { return handle_; }
  void* data() const { return data_; }
  int64_t dim() const { return dim_; }
  const int64_t* sizes() const { return sizes_; }
  const int64_t* strides() const { return strides_; }
  int64_t size(int64_t d) const { return sizes_[d]; }
  int64_t stride(int64_t d) const { return strides_[d]; }
  Dtype dtype() const { return dtype_; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d = 0; d < dim_; ++d) n *= sizes_[d];
    return n;
  }

 private:
  AtenTensorHandle handle_;
  void* data_ = nullptr;
  int64_t dim_ = 0;
  int64_t* sizes_ = nullptr;
  int64_t* strides_ = nullptr;
  Dtype dtype_ = Dtype::Float32;
};

// A tensor the op made: freed unless released to the caller (a return value).
class Tensor {
 public:
  static Tensor empty_strided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, Dtype dtype) {
    if (sizes.size() != strides.size()) throw std::invalid_argument("sizes and strides differ in length");
    AtenTensorHandle h = nullptr;
    check(pt2rt_lite_aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(),
                                              static_cast<int32_t>(dtype), /*cpu*/ 0, 0, &h),
          "empty_strided");
    return Tensor(h);
  }
  static Tensor empty_like(const TensorRef& like) {
    AtenTensorHandle h = nullptr;
    check(pt2rt_lite_empty_like(like.handle(), &h), "empty_like");
    return Tensor(h);
  }
  static Tensor empty_contiguous(const int64_t* sizes, int64_t dim, Dtype dtype) {
    std::vector<int64_t> s(sizes, sizes + dim), st(static_cast<std::size_t>(dim));
    int64_t step = 1;
    for (int64_t d = dim - 1; d >= 0; --d) {
      st[static_cast<std::size_t>(d)] = step;
      step *= s[static_cast<std::size_t>(d)] > 1 ? s[static_cast<std::size_t>(d)] : 1;
    }
    return empty_strided(s, st, dtype);
  }
  // A contiguous copy of t (for kernels that read dense rows).
  static Tensor contiguous(const TensorRef& t) {
    Tensor out = empty_contiguous(t.sizes(), t.dim(), t.dtype());
    check(pt2rt_lite_aoti_torch_copy_(out.handle_, t.handle(), 0), "copy_");
    return out;
  }
  Tensor(Tensor&& other) noexcept : handle_(other.handle_), ref_(other.ref_) { other.handle_ = nullptr; }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor& operator=(Tensor&&) = delete;
  ~Tensor() {
    if (handle_ != nullptr) pt2rt_lite_aoti_torch_delete_tensor_object(handle_);
  }
  const TensorRef& ref() const { return ref_; }
  AtenTensorHandle release() {
    AtenTensorHandle h = handle_;
    handle_ = nullptr;
    return h;
  }

 private:
  explicit Tensor(AtenTensorHandle h) : handle_(h), ref_(owned_ref(h)) {}
  static TensorRef owned_ref(AtenTensorHandle h) {
    try {
      return TensorRef(h);
    } catch (...) {
      pt2rt_lite_aoti_torch_delete_tensor_object(h);  // not yet held by a Tensor
      throw;
    }
  }
  AtenTensorHandle handle_;
  TensorRef ref_;
};

// Runs f, turning what it throws into the runtime's error message (prefixed with what) and a failure code.
template <class F>
AOTITorchError guarded(const char* what, F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    pt2rt_lite_set_error((std::string(what) + ": " + e.what()).c_str());
  } catch (...) {
    pt2rt_lite_set_error((std::string(what) + ": unknown error").c_str());
  }
  return 1;
}

// f(begin, end) over [begin, end) on the runtime's threads (pt2rt_lite_parallel_for). What f throws on any thread is
// thrown here, on the caller's, once every part has run (the first thing thrown).
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  struct Context {
    explicit Context(const F& fn) : f(fn) {}
    const F& f;
    std::atomic<bool> failed{false};
    std::mutex mutex;
    std::exception_ptr error;
  } context(f);
  pt2rt_lite_parallel_for(
      begin, end, grain,
      [](void* c, int64_t b, int64_t e) {
        auto& ctx = *static_cast<Context*>(c);
        if (ctx.failed.load(std::memory_order_relaxed)) return;
        try {
          ctx.f(b, e);
        } catch (...) {
          std::lock_guard<std::mutex> lock(ctx.mutex);
          if (!ctx.error) ctx.error = std::current_exception();
          ctx.failed.store(true, std::memory_order_relaxed);
        }
      },
      &context);
  if (context.error) std::rethrow_exception(context.error);
}

}  // namespace pt2rt::lite_op
