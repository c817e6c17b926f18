// libFuzzer target: the spec JSON of a package (the AOTI metadata record and the pt2rt spec inside it).
// Contract: any bytes give a Spec or a pt2rt::Error; any other exception or a crash is a finding.
#include "fuzz.h"

#include "../../runtime/src/parsers.h"

#include <nlohmann/json.hpp>

namespace {

std::string parse(const std::string& metadata) {
  try {
    const pt2rt::Spec spec = pt2rt::detail::parse_spec(metadata, "fuzz.pt2");
    // What the runtime reads from a spec later must be usable as parsed.
    for (const auto& t : spec.inputs)
      for (const auto& d : t.dynamic_dims) (void)t.shape.at(static_cast<size_t>(d.dim));
    return "ok";
  } catch (const pt2rt::Error& e) {
    return std::string("error: ") + e.what();
  }
}

}  // namespace

std::string pt2rt_fuzz_outcome(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // the bytes as the metadata record, then as the spec inside a well-formed metadata record (so mutations reach
  // the spec's own parser)
  const nlohmann::json wrapped = {{"pt2rt_spec", text}};
  return "metadata: " + parse(text) +
         " | spec: " + parse(wrapped.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}
