#include <pt2rt/aten.h>

#include "internal.h"

namespace pt2rt {

Tensor from_aten(const at::Tensor& t) { return detail::wrap(t); }

at::Tensor to_aten(const Tensor& tensor) { return detail::TensorAccess::aten(tensor); }

std::vector<at::Tensor> run(const Runtime& runtime, const std::vector<at::Tensor>& inputs) {
  std::vector<Tensor> owned;
  std::vector<TensorView> views;
  owned.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) throw Error(ErrorCode::Input, "input " + std::to_string(i) + " is an undefined tensor");
    if (!detail::from_scalar_type(inputs[i].scalar_type())) {
      throw Error(ErrorCode::Input, "input " + std::to_string(i) + " has unsupported dtype " +
                                        c10::toString(inputs[i].scalar_type()));
    }
    owned.push_back(detail::wrap(inputs[i]));
    views.push_back(owned.back().view());
  }
  std::vector<at::Tensor> out;
  for (const auto& t : runtime.run(views)) out.push_back(to_aten(t));
  return out;
}

}  // namespace pt2rt
