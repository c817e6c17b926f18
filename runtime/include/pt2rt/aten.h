// at::Tensor overloads of the pt2rt API, for programs that already use libtorch (include after ATen).
#pragma once

#include <pt2rt/pt2rt.h>

#include <ATen/Tensor.h>

#include <vector>

namespace pt2rt {

// Validated like Runtime::run; non-contiguous and channels_last inputs are copied to contiguous first.
PT2RT_API std::vector<at::Tensor> run(const Runtime& runtime, const std::vector<at::Tensor>& inputs);
// The same memory, no copy.
PT2RT_API at::Tensor to_aten(const Tensor& tensor);
// The same memory when `t` is contiguous, else a contiguous copy.
PT2RT_API Tensor from_aten(const at::Tensor& t);

}  // namespace pt2rt
