// The body of an HTTP infer request - the protocol's JSON, with the binary tensor data extension - read against a
// model's spec. No HTTP library here: tests/fuzz/fuzz_infer_request.cpp fuzzes it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <pt2rt/pt2rt.h>

namespace pt2serve {

struct HttpInferRequest {
  std::vector<pt2rt::Tensor> inputs;             // in the spec's order
  std::vector<std::pair<size_t, bool>> outputs;  // (output index, as binary data), in the order asked for
  nlohmann::json id;                             // the request's "id", echoed; null when it has none
};

// `header_length`: the Inference-Header-Content-Length header's value, nullptr when absent (the whole body is
// JSON). Any malformed, inconsistent or out-of-range part throws BadRequest naming it; nothing else is thrown for
// any bytes (other than std::bad_alloc).
HttpInferRequest parse_http_infer(const pt2rt::Spec& spec, std::string_view body, const std::string* header_length,
                                  size_t max_bytes);

// An output tensor as the JSON "data" array; BadRequest for the datatypes JSON cannot carry (FP16, BF16).
nlohmann::json tensor_to_json(const pt2rt::Tensor& t);

}  // namespace pt2serve
