// The byte parsers of libpt2rt: everything it reads that it did not write (fuzzed: tests/fuzz). Every bad input
// is a pt2rt::Error, never another exception or a crash. One file each: parse_spec.cpp, parse_tensors.cpp,
// parse_golden.cpp; torch_save.cpp reads torch.save bytes for the last two.
#pragma once

#include "internal.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace pt2rt::detail {

// torch.save (zip) bytes -> the saved value. What our checks reject throws DamagedFile (its message is for
// users); what torch rejects throws torch's c10::Error.
struct DamagedFile : std::runtime_error {
  using std::runtime_error::runtime_error;
};
c10::IValue unpickle(const std::vector<char>& bytes);
// max_bytes bounds the tensors' size once made contiguous (a stride-0 tensor in a small file can claim any size).
std::vector<Tensor> parse_tensor_file(const std::vector<char>& bytes, const std::string& path,
                                      std::size_t max_bytes = std::size_t{4} << 30);
struct Golden {
  std::vector<std::string> names;
  std::vector<std::vector<at::Tensor>> inputs, outputs;
};
Golden parse_golden(const std::vector<char>& bytes, const std::string& package_path);

}  // namespace pt2rt::detail
