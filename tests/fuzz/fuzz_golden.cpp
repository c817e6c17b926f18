// libFuzzer target: the golden cases record of a package (pt2rt/golden.pt), torch.save zip format.
// Contract: any bytes give golden cases or a pt2rt::Error; any other exception or a crash is a finding.
#include "fuzz.h"

#include "../../runtime/src/parsers.h"

#include <vector>

std::string pt2rt_fuzz_outcome(const uint8_t* data, size_t size) {
  const std::vector<char> bytes(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  try {
    const auto golden = pt2rt::detail::parse_golden(bytes, "fuzz.pt2");
    for (const auto& cases : {golden.inputs, golden.outputs})
      for (const auto& c : cases)
        for (const auto& t : c) (void)pt2rt::detail::wrap(t).data();  // what verify() does with them
    return "ok: " + std::to_string(golden.inputs.size()) + " cases";
  } catch (const pt2rt::Error& e) {
    return std::string("error: ") + e.what();
  }
}
