// Error classes: exit codes and names (docs/errors.md), and error messages without torch's backtraces.
#include "internal.h"

#include <string>

namespace pt2rt {

int exit_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::Usage: return 2;
    case ErrorCode::Package: return 3;
    case ErrorCode::OpsLibrary: return 4;
    case ErrorCode::Input: return 5;
    case ErrorCode::IO: return 6;
    case ErrorCode::Runtime: return 7;
  }
  return 7;
}

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::Usage: return "usage";
    case ErrorCode::Package: return "package";
    case ErrorCode::OpsLibrary: return "ops library";
    case ErrorCode::Input: return "input";
    case ErrorCode::IO: return "I/O";
    case ErrorCode::Runtime: return "runtime";
  }
  return "runtime";
}

namespace detail {

std::string short_what(const std::exception& e) {
  std::string text;
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) {
    text = c10e->what_without_backtrace();
  } else {
    text = e.what();
  }
  const auto nl = text.find('\n');
  if (nl != std::string::npos) text.resize(nl);
  return text;
}

}  // namespace detail
}  // namespace pt2rt
