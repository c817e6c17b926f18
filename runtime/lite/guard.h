// Shim functions return an error code to the model library; the message waits in last_error() for the runtime.
#pragma once

#include <exception>
#include <string>

#include "tensor.h"

namespace pt2rt::lite {

template <class F>
AOTITorchError guarded(const char* what, F&& f) noexcept {
  try {
    f();
    return kShimSuccess;
  } catch (const std::exception& e) {
    set_last_error(std::string(what) + ": " + e.what());
  } catch (...) {
    set_last_error(std::string(what) + ": unknown error");
  }
  return kShimFailure;
}

}  // namespace pt2rt::lite
