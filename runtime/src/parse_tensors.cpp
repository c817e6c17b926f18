// Byte parser: a tensor file (torch.save zip: a tensor, or a list/tuple of tensors) -> tensors. Fuzzed
// (fuzz_tensors).
#include "parsers.h"

#include <ATen/ATen.h>

namespace pt2rt {

namespace detail {

std::vector<Tensor> parse_tensor_file(const std::vector<char>& bytes, const std::string& path, std::size_t max_bytes) {
  c10::IValue value;
  try {
    value = unpickle(bytes);
  } catch (const DamagedFile& e) {
    throw Error(ErrorCode::IO, path + " is a damaged torch.save file (" + e.what() + ")");
  } catch (const std::exception&) {  // torch's reader explains zip internals; the user needs the verdict
    throw Error(ErrorCode::IO, path + " is not a tensor file written by torch.save (zip format)");
  }
  std::vector<Tensor> out;
  std::size_t total = 0;
  auto add = [&](const c10::IValue& v) {
    if (!v.isTensor()) throw Error(ErrorCode::IO, path + " holds a " + v.tagKind() + "; expected tensors");
    const at::Tensor& t = v.toTensor();
    std::size_t bytes_needed = t.element_size();
    bool overflow = false;
    for (const int64_t d : t.sizes()) overflow |= __builtin_mul_overflow(bytes_needed, static_cast<std::size_t>(d), &bytes_needed);
    overflow |= __builtin_add_overflow(total, bytes_needed, &total);
    if (overflow || total > max_bytes) {
      throw Error(ErrorCode::IO, path + " holds tensors of " + (overflow ? std::string("more than 2^64") : std::to_string(total)) +
                                     " bytes once made contiguous; at most " + std::to_string(max_bytes) +
                                     " are accepted here");
    }
    out.push_back(wrap(t));
  };
  if (value.isTensor()) {
    add(value);
  } else if (value.isList()) {
    for (const auto& v : value.toListRef()) add(v);
  } else if (value.isTuple()) {
    for (const auto& v : value.toTupleRef().elements()) add(v);
  } else {
    throw Error(ErrorCode::IO, path + " holds a " + value.tagKind() + "; expected a tensor or a list of tensors");
  }
  return out;
}

}  // namespace detail

}  // namespace pt2rt
