// libFuzzer target: pt2serve's HTTP content codings (serve/http_codec.cpp). An input's first line is a
// Content-Encoding (and, read as an Accept-Encoding, what the answer would be compressed with); the rest is the body,
// decoded with at most 1 MiB out. Contract: any bytes give the decoded body, a BadRequest or a TooLarge; anything else
// (another exception, a sanitizer report, a crash, more memory than the bound) is a finding, and so is a decoded body
// that does not come back the same through the response coding (encode_body, then decode_body). The outcome names
// the decoded size and a hash of its bytes, so a decoder that changes fails the replay.
#include "fuzz.h"

#include "../../serve/http_codec.h"
#include "../../serve/protocol.h"

#include <cstdlib>
#include <string>
#include <string_view>

namespace {
constexpr size_t kMaxDecoded = size_t{1} << 20;
}  // namespace

std::string pt2rt_fuzz_outcome(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view coding = newline == std::string_view::npos ? std::string_view() : input.substr(0, newline);
  const std::string_view body = newline == std::string_view::npos ? input : input.substr(newline + 1);
  const std::string answer = pt2serve::response_coding(coding);
  std::string out;
  try {
    const std::string decoded = pt2serve::decode_body(coding, body, kMaxDecoded);
    if (decoded.size() > kMaxDecoded) std::abort();  // the bound did not hold
    out = "ok: " + std::to_string(decoded.size()) + " bytes #" + pt2rt_fuzz_hash(decoded);
    for (const char* c : {"gzip", "deflate"}) {
      if (pt2serve::decode_body(c, pt2serve::encode_body(c, decoded), kMaxDecoded) != decoded) std::abort();
    }
  } catch (const pt2serve::BadRequest& e) {
    out = std::string("error: ") + e.what();
  } catch (const pt2serve::TooLarge& e) {
    out = std::string("too large: ") + e.what();
  }
  return out + " | answer: " + (answer.empty() ? "identity" : answer);
}
