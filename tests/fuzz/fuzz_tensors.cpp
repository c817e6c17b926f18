// libFuzzer target: tensor files (pt2run's --inputs, pt2rt::load_tensors), torch.save zip format.
// Contract: any bytes give tensors or a pt2rt::Error; any other exception or a crash is a finding.
#include "fuzz.h"

#include "../../runtime/src/parsers.h"

#include <stdexcept>
#include <vector>

std::string pt2rt_fuzz_outcome(const uint8_t* data, size_t size) {
  const std::vector<char> bytes(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size);
  try {
    const auto tensors = pt2rt::detail::parse_tensor_file(bytes, "fuzz.pt");
    std::string what = "ok:";
    for (const auto& t : tensors) {
      // every byte a tensor claims must be readable (ASan checks the reads)
      const auto* p = static_cast<const unsigned char*>(t.data());
      unsigned sum = 0;
      for (std::size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
      if (t.nbytes() != static_cast<std::size_t>(t.numel()) * pt2rt::dtype_size(t.dtype()))
        throw std::logic_error("tensor size does not match its shape");
      (void)sum;
      what += std::string(" ") + pt2rt::dtype_name(t.dtype()) + "(";
      for (size_t i = 0; i < t.shape().size(); ++i) what += (i ? "," : "") + std::to_string(t.shape()[i]);
      what += ")";
    }
    return what;
  } catch (const pt2rt::Error& e) {
    return std::string("error: ") + e.what();
  }
}
