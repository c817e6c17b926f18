// Error classes: exit codes and names (docs/errors.md).
#include "common.h"

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

}  // namespace pt2rt
