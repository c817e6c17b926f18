// The model both request fuzz targets (fuzz_infer_request: HTTP, fuzz_grpc_request: gRPC) read requests against:
// a dynamic batch dim and one input of each kind of datatype; and how their outcomes name what a request gave.
#pragma once

#include "fuzz.h"

#include <pt2rt/pt2rt.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

// typed_only: without the FP16 input (FP16 has no typed contents field in gRPC, only raw bytes).
inline const pt2rt::Spec& infer_spec(bool typed_only = false) {
  using pt2rt::DType;
  static const pt2rt::Spec full = [] {
    pt2rt::Spec spec;
    spec.inputs = {{"x", DType::Float32, {-1, 3, 2, 2}, {}}, {"ids", DType::Int64, {-1}, {}},
                   {"mask", DType::Bool, {-1}, {}},          {"small", DType::Int8, {2}, {}},
                   {"half", DType::Float16, {2}, {}}};
    spec.outputs = {{"y", DType::Float32, {-1, 3}, {}}, {"z", DType::Int32, {-1}, {}}, {"w", DType::BFloat16, {2}, {}}};
    return spec;
  }();
  static const pt2rt::Spec typed = [] {
    pt2rt::Spec spec = full;
    spec.inputs.pop_back();
    return spec;
  }();
  return typed_only ? typed : full;
}

// "ok: x[1,3,2,2]#<hash of its bytes> ids[3]#... ->": each input's shape and bytes, so a changed conversion shows.
inline std::string describe_inputs(const pt2rt::Spec& spec, const std::vector<pt2rt::Tensor>& inputs) {
  std::string out = "ok:";
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    out += " " + spec.inputs[i].name + "[";
    for (size_t d = 0; d < t.shape().size(); ++d) out += (d ? "," : "") + std::to_string(t.shape()[d]);
    out += "]#" + pt2rt_fuzz_hash(std::string_view(static_cast<const char*>(t.data()), t.nbytes()));
  }
  return out + " ->";
}
