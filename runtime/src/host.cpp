// Can this host run the package: torch version, device (the CPU variant: cpu_features.cpp).
#include "internal.h"

#include <limits>

#include <torch/cuda.h>
#include <torch/headeronly/version.h>

namespace pt2rt {

const char* torch_version() {
  static const std::string v = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                               std::to_string(TORCH_VERSION_PATCH);
  return v.c_str();
}

namespace detail {

void check_host(const Spec& spec, const Options& options) {
  if (options.check_torch_version) {
    const std::string exported = spec.torch_version.substr(0, spec.torch_version.find('+'));
    if (exported != torch_version()) {
      throw Error(ErrorCode::Package, "the package was exported with torch " + spec.torch_version +
                                          "; this runtime is built with torch " + torch_version() +
                                          " (export it with the same torch)");
    }
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
