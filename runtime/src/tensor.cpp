// pt2rt::Tensor, dtypes, errors and tensor files.
#include "internal.h"
#include "parsers.h"

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>

#include <cstdint>
#include <cstring>

#include <fstream>
#include <iterator>
#include <sstream>

namespace pt2rt {

namespace detail {

// c10's ScalarType numbering is the shim's dtype code (dtypes.cpp)
at::ScalarType to_scalar_type(DType dtype) { return static_cast<at::ScalarType>(dtype_code(dtype)); }

std::optional<DType> from_scalar_type(at::ScalarType t) { return dtype_of_code(static_cast<int32_t>(t)); }

Tensor wrap(at::Tensor t) {
  auto dtype = from_scalar_type(t.scalar_type());
  if (!dtype) throw Error(ErrorCode::Runtime, std::string("unsupported tensor dtype ") + c10::toString(t.scalar_type()));
  return TensorAccess::make(t.contiguous(), *dtype);
}

at::Tensor borrow(const TensorView& view) {
  check_shape(view, "tensor view");
  auto options = at::TensorOptions().dtype(to_scalar_type(view.dtype));
  options = view.device == Device::CUDA ? options.device(at::kCUDA, static_cast<c10::DeviceIndex>(view.device_index))
                                        : options.device(at::kCPU);
  return at::from_blob(const_cast<void*>(view.data), view.shape, options);
}

std::string short_what(const std::exception& e) {
  std::string text;
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) {
    text = c10e->what_without_backtrace();
  } else {
    text = e.what();
  }
  const auto nl = text.find('\n');
  if (nl != std::string::npos) text.resize(nl);
  return text;
}

}  // namespace detail

Tensor::Tensor() : impl_(std::make_shared<Impl>(Impl{at::Tensor(), {}, DType::Float32})) {}
Tensor::Tensor(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tensor Tensor::copy_of(const TensorView& view) {
  detail::check_shape(view, "Tensor::copy_of");
  if (view.data == nullptr && !view.shape.empty()) {
    int64_t n = 1;
    for (auto d : view.shape) n *= d;  // no overflow: checked above
    if (n != 0) throw Error(ErrorCode::Usage, "Tensor::copy_of: the view's data is null");
  }
  return detail::wrap(detail::borrow(view).to(at::kCPU, /*non_blocking=*/false, /*copy=*/true));
}

const void* Tensor::data() const { return impl_->t.defined() ? impl_->t.const_data_ptr() : nullptr; }
void* Tensor::mutable_data() { return impl_->t.defined() ? impl_->t.mutable_data_ptr() : nullptr; }
const std::vector<int64_t>& Tensor::shape() const { return impl_->shape; }
DType Tensor::dtype() const { return impl_->dtype; }
Device Tensor::device() const { return impl_->t.defined() && impl_->t.is_cuda() ? Device::CUDA : Device::CPU; }
int64_t Tensor::numel() const { return impl_->t.defined() ? impl_->t.numel() : 0; }
std::size_t Tensor::nbytes() const { return impl_->t.defined() ? impl_->t.nbytes() : 0; }

TensorView Tensor::view() const {
  TensorView v;
  v.data = data();
  v.shape = impl_->shape;
  v.dtype = impl_->dtype;
  v.device = device();
  v.device_index = impl_->t.defined() && impl_->t.is_cuda() ? impl_->t.device().index() : 0;
  return v;
}

Tensor Tensor::to_cpu() const {
  if (device() == Device::CPU) return *this;
  return detail::wrap(impl_->t.cpu());
}

Tensor Tensor::to(Device device, int device_index) const {
  if (device == Device::CPU) return to_cpu();
  const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (device_index < 0 || device_index >= gpus) {
    throw Error(ErrorCode::Input, "cannot copy a tensor to cuda:" + std::to_string(device_index) + ": this host has " +
                                      std::to_string(gpus) + " usable CUDA devices");
  }
  const at::Device target(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  if (impl_->t.device() == target) return *this;
  return detail::wrap(impl_->t.to(target).contiguous());
}


std::vector<Tensor> load_tensors(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::IO, "cannot read tensor file " + path + ": " + std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return detail::parse_tensor_file(bytes, path, max_bytes);
}

void save_tensors(const std::string& path, const std::vector<Tensor>& tensors) {
  c10::IValue value;
  if (tensors.size() == 1) {
    value = detail::TensorAccess::aten(tensors[0]);
  } else {
    // A tuple: the pickler writes a list through torch.jit._pickle (build_tensorlist, restore_type_tag), which
    // torch.load refuses by default (weights_only=True).
    std::vector<c10::IValue> items;
    for (const auto& t : tensors) items.emplace_back(detail::TensorAccess::aten(t));
    value = c10::ivalue::Tuple::create(std::move(items));
  }
  std::vector<char> bytes;
  try {
    bytes = torch::jit::pickle_save(value);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::IO, "cannot serialise the tensors for " + path + ": " + detail::short_what(e));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorCode::IO, "cannot write " + path + ": " + std::strerror(errno));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error(ErrorCode::IO, "cannot write " + path + ": " + std::strerror(errno));
}

}  // namespace pt2rt
