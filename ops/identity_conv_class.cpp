// my_ops::IdentityConvClass: a depthwise convolution that owns its weight and travels in a package.
#include "identity_conv.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace my_ops {

namespace {

constexpr int64_t kStateVersion = 1;

at::Tensor identity_weight(int64_t channels, int64_t k) {
  at::Tensor w = at::zeros({channels, 1, k, k}, at::kFloat);
  w.select(2, k / 2).select(2, k / 2).fill_(1.0);
  return w;
}

void check_kernel_size(int64_t k) {
  TORCH_CHECK(k >= 1 && k <= kMaxKernelSize && k % 2 == 1,
              "IdentityConvClass: expected an odd kernel_size in 1..", kMaxKernelSize, ", got ", k);
}

// A CPU copy the caller cannot change later; CPU tensors pickle everywhere.
at::Tensor owned_copy(const at::Tensor& weight) {
  return weight.detach().to(at::TensorOptions().device(at::kCPU), /*non_blocking=*/false, /*copy=*/true,
                            at::MemoryFormat::Contiguous);
}

}  // namespace

class IdentityConvClass : public torch::CustomClassHolder {
 public:
  using State = std::tuple<int64_t, at::Tensor>;  // (format version, weight)

  IdentityConvClass(int64_t channels, int64_t kernel_size) {
    TORCH_CHECK(channels >= 1, "IdentityConvClass: expected channels >= 1, got ", channels);
    check_kernel_size(kernel_size);
    weight_ = identity_weight(channels, kernel_size);
  }

  // From a saved weight of any valid shape (unpickling).
  explicit IdentityConvClass(const at::Tensor& weight) {
    TORCH_CHECK(weight.defined() && weight.dim() == 4,
                "IdentityConvClass: expected a weight of shape (channels, 1, k, k), got ",
                weight.defined() ? weight.sizes() : at::IntArrayRef{});
    check_weight(weight, weight.size(0), "IdentityConvClass");
    weight_ = owned_copy(weight);
  }

  // Safe to call from many threads, also while another thread calls set_weight.
  at::Tensor forward(const at::Tensor& x) const {
    check_input(x, "IdentityConvClass.forward");
    const at::Tensor w = weight_for(x);
    TORCH_CHECK(x.size(1) == w.size(0), "IdentityConvClass.forward: expected an input with ", w.size(0),
                " channels (dim 1), got shape ", x.sizes());
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("my_ops::depthwise_conv2d", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
    return op.call(x, w);
  }

  at::Tensor get_weight() const {
    std::lock_guard<std::mutex> lock(mu_);
    return weight_.clone();
  }

  // The new weight must have the shape of the current one.
  void set_weight(const at::Tensor& weight) {
    const auto shape = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      return weight_.sizes().vec();
    }();
    TORCH_CHECK(weight.defined() && weight.sizes() == at::IntArrayRef(shape),
                "IdentityConvClass.set_weight: expected a weight of shape ", at::IntArrayRef(shape), ", got ",
                weight.defined() ? weight.sizes() : at::IntArrayRef{});
    check_weight(weight, shape[0], "IdentityConvClass.set_weight");
    at::Tensor owned = owned_copy(weight);
    std::lock_guard<std::mutex> lock(mu_);
    weight_ = std::move(owned);
    converted_.clear();
  }

  int64_t channels() const {
    std::lock_guard<std::mutex> lock(mu_);
    return weight_.size(0);
  }

  int64_t kernel_size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return weight_.size(2);
  }

  // For torch.export: the held tensor itself, not a copy - with copies, torch.compile of a module holding two
  // objects fails with "Duplicate tensors found" (a freed copy's address is reused by the next one).
  std::tuple<std::tuple<std::string, at::Tensor>> obj_flatten() const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::make_tuple(std::make_tuple(std::string("weight"), weight_));
  }

  State state() const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::make_tuple(kStateVersion, weight_);
  }

  static c10::intrusive_ptr<IdentityConvClass> from_state(State state) {
    TORCH_CHECK(std::get<0>(state) == kStateVersion, "IdentityConvClass: unsupported state version ",
                std::get<0>(state), ", this library reads version ", kStateVersion);
    return c10::make_intrusive<IdentityConvClass>(std::get<1>(state));
  }

 private:
  // The weight on x's device in x's accumulation dtype, converted once and cached.
  at::Tensor weight_for(const at::Tensor& x) const {
    const at::ScalarType acc = at::toOpMathType(x.scalar_type());
    std::lock_guard<std::mutex> lock(mu_);
    if (weight_.scalar_type() == acc && x.device().is_cpu()) return weight_;
    for (const auto& [key, t] : converted_) {
      if (key.first == x.device() && key.second == acc) return t;
    }
    at::Tensor t = weight_.to(x.device(), acc).contiguous();
    converted_.emplace_back(std::make_pair(x.device(), acc), t);
    return t;
  }

  mutable std::mutex mu_;
  at::Tensor weight_;  // (C, 1, k, k), CPU, contiguous; replaced, never written in place
  mutable std::vector<std::pair<std::pair<c10::Device, at::ScalarType>, at::Tensor>> converted_;
};

}  // namespace my_ops

TORCH_LIBRARY_FRAGMENT(my_ops, m) {
  m.class_<my_ops::IdentityConvClass>("IdentityConvClass")
      .def(torch::init<int64_t, int64_t>(), "", {torch::arg("channels"), torch::arg("kernel_size") = 3})
      .def("forward", &my_ops::IdentityConvClass::forward)
      .def("get_weight", &my_ops::IdentityConvClass::get_weight)
      .def("set_weight", &my_ops::IdentityConvClass::set_weight)
      .def("channels", &my_ops::IdentityConvClass::channels)
      .def("kernel_size", &my_ops::IdentityConvClass::kernel_size)
      .def("__obj_flatten__", &my_ops::IdentityConvClass::obj_flatten)
      .def_pickle(
          [](const c10::intrusive_ptr<my_ops::IdentityConvClass>& self) { return self->state(); },
          [](my_ops::IdentityConvClass::State state) {
            return my_ops::IdentityConvClass::from_state(std::move(state));
          });
}
