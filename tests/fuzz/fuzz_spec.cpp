// libFuzzer target: the spec JSON of a package (the AOTI metadata record and the pt2rt spec inside it).
// Contract: any bytes give a Spec or a pt2rt::Error; any other exception or a crash is a finding.
#include "../../runtime/src/internal.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace {

void parse(const std::string& metadata) {
  try {
    const pt2rt::Spec spec = pt2rt::detail::parse_spec(metadata, "fuzz.pt2");
    // What the runtime reads from a spec later must be usable as parsed.
    for (const auto& t : spec.inputs)
      for (const auto& d : t.dynamic_dims) (void)t.shape.at(static_cast<size_t>(d.dim));
  } catch (const pt2rt::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  parse(text);  // the bytes as the metadata record
  // the bytes as the spec inside a well-formed metadata record, so mutations reach the spec's own parser
  const nlohmann::json wrapped = {{"pt2rt_spec", text}};
  parse(wrapped.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return 0;
}
