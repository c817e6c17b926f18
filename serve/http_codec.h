// HTTP content codings of pt2serve's bodies: request bodies decoded with the decoded size bounded as they inflate
// (a few KB of gzip or brotli can expand to gigabytes), response bodies compressed when the client asks.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace pt2serve {

// `body` decoded per a Content-Encoding header's value (gzip, x-gzip, deflate, br, identity; a list is applied
// right to left). TooLarge as soon as the decoded bytes pass `max_bytes`; BadRequest for a broken stream or a
// coding not in that list, naming it.
std::string decode_body(std::string_view content_encoding, std::string_view body, size_t max_bytes);

// The coding to answer with for an Accept-Encoding header's value: "gzip", "deflate" or "" (identity). A coding
// with q=0 is refused, as RFC 9110 says.
std::string response_coding(std::string_view accept_encoding);

// `body` compressed with `coding` ("gzip" or "deflate").
std::string encode_body(std::string_view coding, std::string_view body);

}  // namespace pt2serve
