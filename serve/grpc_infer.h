// A gRPC ModelInferRequest read against a model's spec: its inputs (raw_input_contents, or the typed contents field
// of each input's datatype) and the outputs it asks for. Protobuf messages only, no gRPC:
// tests/fuzz/fuzz_grpc_request.cpp fuzzes it from the wire bytes.
#pragma once

#include <cstddef>
#include <vector>

#include <pt2rt/pt2rt.h>

namespace inference {
class ModelInferRequest;
}

namespace pt2serve {

struct GrpcInferRequest {
  std::vector<pt2rt::Tensor> inputs;  // in the spec's order
  std::vector<size_t> outputs;        // output indices, in the order asked for (all of them when none were named)
};

// Any inconsistent or out-of-range part throws BadRequest naming it; nothing else is thrown for any message
// (other than std::bad_alloc).
GrpcInferRequest parse_grpc_infer(const pt2rt::Spec& spec, const inference::ModelInferRequest& request,
                                  size_t max_bytes);

}  // namespace pt2serve
