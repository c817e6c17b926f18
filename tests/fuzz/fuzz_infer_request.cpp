// libFuzzer target: the body of an HTTP infer request as pt2serve reads it (serve/http_infer.cpp: the protocol's
// JSON with the binary tensor data extension) against a fixed spec - a dynamic batch dim and one input of each
// kind of datatype. An input that starts with "H<value>\n" sends <value> as Inference-Header-Content-Length; the
// rest is the body. Contract: any bytes give inputs or a BadRequest; any other exception, a sanitizer report or a
// crash is a finding. The outcome names each input's shape and a hash of its bytes, so a conversion that changes
// fails the replay.
#include "fuzz.h"
#include "infer_spec.h"

#include "../../serve/http_infer.h"
#include "../../serve/protocol.h"

#include <string>

std::string pt2rt_fuzz_outcome(const uint8_t* data, size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  std::string header;
  bool has_header = false;
  if (!body.empty() && body[0] == 'H' && body.find('\n') != std::string::npos) {
    header = body.substr(1, body.find('\n') - 1);
    body.erase(0, body.find('\n') + 1);
    has_header = true;
  }
  try {
    const auto request = pt2serve::parse_http_infer(infer_spec(), body, has_header ? &header : nullptr, 1 << 20);
    std::string out = describe_inputs(infer_spec(), request.inputs);
    for (const auto& [index, binary] : request.outputs) out += " " + infer_spec().outputs[index].name + (binary ? ":bin" : ":json");
    return out;
  } catch (const pt2serve::BadRequest& e) {
    return std::string("error: ") + e.what();
  }
}
