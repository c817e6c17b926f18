#include "protocol.h"

#include <pt2rt/pt2rt.h>

#include "model.h"

namespace pt2serve {

Failure current_failure() {
  try {
    throw;
  } catch (const NotFound& e) {
    return {ErrorKind::NotFound, clip(e.what())};
  } catch (const BadRequest& e) {
    return {ErrorKind::InvalidArgument, clip(e.what())};
  } catch (const TooLarge& e) {
    return {ErrorKind::TooLarge, clip(e.what())};
  } catch (const Unavailable& e) {
    return {ErrorKind::Unavailable, clip(e.what())};
  } catch (const pt2rt::Error& e) {
    const bool client = e.code() == pt2rt::ErrorCode::Input || e.code() == pt2rt::ErrorCode::Usage;
    return {client ? ErrorKind::InvalidArgument : ErrorKind::Internal, clip(e.what())};
  } catch (const std::bad_alloc&) {
    return {ErrorKind::Unavailable, "out of memory for this request"};
  } catch (const std::exception& e) {
    return {ErrorKind::Internal, clip(e.what())};
  } catch (...) {
    return {ErrorKind::Internal, "internal error"};
  }
}

int http_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidArgument: return 400;
    case ErrorKind::NotFound: return 404;
    case ErrorKind::TooLarge: return 413;
    case ErrorKind::Unavailable: return 503;
    case ErrorKind::Internal: break;
  }
  return 500;
}

std::string clip(std::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  const std::string tail = "... (" + std::to_string(text.size()) + " bytes)";
  size_t keep = max > tail.size() ? max - tail.size() : 0;
  // back to the first byte of a UTF-8 character (continuation bytes are 10xxxxxx)
  while (keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;
  return std::string(text.substr(0, keep)) + tail;
}

void check_json_depth(const char* begin, const char* end, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (const char* p = begin; p < end; ++p) {
    const char c = *p;
    if (in_string) {
      if (c == '\\') {
        ++p;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw BadRequest("the JSON nests lists and objects deeper than " + std::to_string(max_depth) +
                         " levels (at byte " + std::to_string(p - begin) + ")");
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

}  // namespace pt2serve
