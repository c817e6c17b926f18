#include "http_codec.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <vector>

#include <brotli/decode.h>
#include <zlib.h>

#include "protocol.h"

namespace pt2serve {
namespace {

std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::vector<std::string> split_list(std::string_view value) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    std::string item = lower_trimmed(value.substr(start, comma - start));
    if (!item.empty()) items.push_back(std::move(item));
    start = comma + 1;
  }
  return items;
}

[[noreturn]] void too_large(size_t max_bytes) {
  throw TooLarge("the request body is larger than the limit, " + std::to_string(max_bytes) +
                 " bytes (--max-request-mb), once decoded");
}

// zlib's inflate with a gzip (31) or zlib (15) header, or raw deflate (-15): a "deflate" body in the wild is
// either of the last two (RFC 9110 says zlib; some clients send raw).
std::string inflate_bounded(std::string_view in, int window_bits, size_t max_bytes, const char* name) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) throw std::runtime_error("zlib: inflateInit2 failed");
  std::string out;
  char buffer[1 << 16];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());  // bodies are < 2 GiB (--max-request-mb)
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof buffer;
    rc = inflate(&z, Z_NO_FLUSH);
    const size_t produced = sizeof buffer - z.avail_out;
    if (rc != Z_OK && rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && produced > 0)) break;
    if (produced > max_bytes - out.size()) {
      inflateEnd(&z);
      too_large(max_bytes);
    }
    out.append(buffer, produced);
    if (rc == Z_OK && z.avail_in == 0 && produced == 0) break;  // truncated
  }
  const bool complete = rc == Z_STREAM_END;
  const size_t trailing = z.avail_in;
  inflateEnd(&z);
  if (!complete || trailing != 0) {
    throw BadRequest(std::string("the request body is not a complete ") + name +
                     " stream (Content-Encoding: " + name + ")");
  }
  return out;
}

std::string brotli_bounded(std::string_view in, size_t max_bytes) {
  BrotliDecoderState* state = BrotliDecoderCreateInstance(nullptr, nullptr, nullptr);
  if (!state) throw std::bad_alloc();
  std::string out;
  uint8_t buffer[1 << 16];
  const uint8_t* next_in = reinterpret_cast<const uint8_t*>(in.data());
  size_t avail_in = in.size();
  BrotliDecoderResult rc = BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT;
  while (rc == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT) {
    uint8_t* next_out = buffer;
    size_t avail_out = sizeof buffer;
    rc = BrotliDecoderDecompressStream(state, &avail_in, &next_in, &avail_out, &next_out, nullptr);
    const size_t got = sizeof buffer - avail_out;
    if (got > max_bytes - out.size()) {
      BrotliDecoderDestroyInstance(state);
      too_large(max_bytes);
    }
    out.append(reinterpret_cast<const char*>(buffer), got);
  }
  BrotliDecoderDestroyInstance(state);
  if (rc != BROTLI_DECODER_RESULT_SUCCESS || avail_in != 0) {
    throw BadRequest("the request body is not a complete br stream (Content-Encoding: br)");
  }
  return out;
}

}  // namespace

std::string decode_body(std::string_view content_encoding, std::string_view body, size_t max_bytes) {
  const std::vector<std::string> codings = split_list(content_encoding);
  std::string decoded;
  std::string_view current = body;  // copied only by the first coding that changes it
  bool changed = false;
  for (auto it = codings.rbegin(); it != codings.rend(); ++it) {
    const std::string& coding = *it;
    if (coding == "identity") continue;
    if (coding == "gzip" || coding == "x-gzip") {
      decoded = inflate_bounded(current, 31, max_bytes, "gzip");
    } else if (coding == "deflate") {
      const auto b0 = static_cast<unsigned char>(current.size() > 0 ? current[0] : 0);
      const auto b1 = static_cast<unsigned char>(current.size() > 1 ? current[1] : 0);
      const bool zlib_header = current.size() >= 2 && (b0 & 0x0f) == 8 && ((b0 << 8) | b1) % 31 == 0;
      decoded = inflate_bounded(current, zlib_header ? 15 : -15, max_bytes, "deflate");
    } else if (coding == "br") {
      decoded = brotli_bounded(current, max_bytes);
    } else {
      throw BadRequest("Content-Encoding '" + clip(coding, 64) +
                       "' is not supported: expected gzip, deflate, br or identity");
    }
    current = decoded;
    changed = true;
  }
  if (current.size() > max_bytes) too_large(max_bytes);
  return changed ? std::move(decoded) : std::string(current);
}

std::string response_coding(std::string_view accept_encoding) {
  bool gzip = false, deflate = false;
  for (const std::string& item : split_list(accept_encoding)) {
    const size_t semi = item.find(';');
    const std::string coding = lower_trimmed(std::string_view(item).substr(0, semi));
    bool refused = false;
    if (semi != std::string::npos) {
      const std::string param = lower_trimmed(std::string_view(item).substr(semi + 1));
      if (param.rfind("q=", 0) == 0) refused = std::strtod(param.c_str() + 2, nullptr) <= 0;
    }
    if (refused) continue;
    if (coding == "gzip" || coding == "x-gzip") gzip = true;
    if (coding == "deflate") deflate = true;
  }
  return gzip ? "gzip" : deflate ? "deflate" : "";
}

std::string encode_body(std::string_view coding, std::string_view body) {
  z_stream z{};
  // level 1: the answer goes out sooner; JSON numbers compress well at any level
  if (deflateInit2(&z, 1, Z_DEFLATED, coding == "gzip" ? 31 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("zlib: deflateInit2 failed");
  }
  std::string out(deflateBound(&z, static_cast<uLong>(body.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  z.avail_in = static_cast<uInt>(body.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("zlib: deflate did not finish");
  return out;
}

}  // namespace pt2serve
