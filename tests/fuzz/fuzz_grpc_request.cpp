// libFuzzer target: a gRPC ModelInferRequest as pt2serve reads it (serve/grpc_infer.cpp), from the bytes on the
// wire - protobuf parses them, then the request is read against the same fixed spec as fuzz_infer_request.cpp (a
// dynamic batch dim and one input of each kind of datatype; with model_name "typed", that spec without its FP16
// input, which has no typed contents field). Contract: any bytes give inputs, "not a
// ModelInferRequest" or a BadRequest; any other exception, a sanitizer report or a crash is a finding. The outcome
// names each input's shape and a hash of its bytes, so a conversion that changes fails the replay.
#include "fuzz.h"
#include "infer_spec.h"

#include "../../serve/grpc_infer.h"
#include "../../serve/protocol.h"
#include "open_inference_grpc.pb.h"

#include <google/protobuf/stubs/logging.h>

#include <string>

std::string pt2rt_fuzz_outcome(const uint8_t* data, size_t size) {
  // protobuf logs every string field that is not UTF-8; the parse result says so already
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  inference::ModelInferRequest q;
  if (!q.ParseFromArray(data, static_cast<int>(size))) return "error: not a ModelInferRequest";
  try {
    const pt2rt::Spec& spec = infer_spec(q.model_name() == "typed");
    const auto request = pt2serve::parse_grpc_infer(spec, q, 1 << 20);
    std::string out = describe_inputs(spec, request.inputs);
    for (const size_t index : request.outputs) out += " " + spec.outputs[index].name;
    return out;
  } catch (const pt2serve::BadRequest& e) {
    return std::string("error: ") + e.what();
  }
}
