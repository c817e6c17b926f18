// Can this host run the package: torch version, device (the CPU variant: cpu_features.cpp).
#include "internal.h"

#include <limits>

#include <torch/cuda.h>

namespace pt2rt {

namespace detail {

void check_host(const Spec& spec, const Options& options) {
  if (options.check_torch_version) {
    const std::string why = why_not_loadable(spec.torch_version, torch_version());
    if (!why.empty()) throw Error(ErrorCode::Package, why);
  }
  if (spec.device == Device::CUDA) {
    if (!torch::cuda::is_available()) {
      throw Error(ErrorCode::Package, "the package is for CUDA, but this host has no usable CUDA device"
#ifndef PT2RT_TORCH_HAS_CUDA
                                      " (and this runtime is a CPU build)"
#endif
      );
    }
    if (options.device_index >= torch::cuda::device_count()) {
      throw Error(ErrorCode::Usage, "device_index " + std::to_string(options.device_index) + " is out of range: " +
                                        std::to_string(torch::cuda::device_count()) + " CUDA devices");
    }
  }
}

}  // namespace detail
}  // namespace pt2rt
