// Byte parser: a package's golden cases record (pt2rt/golden.pt, torch.save zip) -> Golden. Fuzzed (fuzz_golden).
#include "parsers.h"

#include <ATen/ATen.h>

namespace pt2rt {

namespace detail {

Golden parse_golden(const std::vector<char>& bytes, const std::string& package_path) {
  const std::string where = package_path + ": golden cases (pt2rt/golden.pt) ";
  const auto damaged = [&](const std::string& what) { return Error(ErrorCode::Package, where + what); };
  c10::IValue value;
  try {
    value = unpickle(bytes);
  } catch (const std::exception& e) {
    throw damaged("unreadable: " + detail::short_what(e));
  }
  // Checked here rather than left to IValue's casts, whose failures are internal asserts with no useful message.
  if (!value.isGenericDict()) throw damaged("hold a " + value.tagKind() + "; expected a dict");
  const auto dict = value.toGenericDict();
  const auto entry = [&](const char* key) {
    const auto it = dict.find(c10::IValue(key));
    if (it == dict.end()) throw damaged(std::string("have no '") + key + "' entry");
    if (!it->value().isList()) throw damaged(std::string("'") + key + "' is a " + it->value().tagKind() + "; expected a list");
    return it->value().toListRef();
  };
  const auto cases = [&](const char* key) {
    std::vector<std::vector<at::Tensor>> out;
    for (const auto& c : entry(key)) {
      if (!c.isList()) throw damaged(std::string("'") + key + "' holds a " + c.tagKind() + "; expected lists of tensors");
      out.emplace_back();
      for (const auto& t : c.toListRef()) {
        if (!t.isTensor()) throw damaged(std::string("'") + key + "' holds a " + t.tagKind() + "; expected tensors");
        out.back().push_back(t.toTensor());
      }
    }
    return out;
  };
  Golden g;
  for (const auto& n : entry("names")) {
    if (!n.isString()) throw damaged("'names' holds a " + n.tagKind() + "; expected strings");
    g.names.push_back(n.toStringRef());
  }
  g.inputs = cases("inputs");
  g.outputs = cases("outputs");
  if (g.names.empty()) throw damaged("hold no cases; expected at least one");
  if (g.names.size() != g.inputs.size() || g.names.size() != g.outputs.size()) {
    throw damaged("are inconsistent: " + std::to_string(g.names.size()) + " names, " +
                  std::to_string(g.inputs.size()) + " inputs, " + std::to_string(g.outputs.size()) + " outputs");
  }
  return g;
}

}  // namespace detail

}  // namespace pt2rt
