// Error classes: exit codes and names (docs/errors.md), in one table for the C++ API, the C API and the CLI.
#include "common.h"

#include <string>

namespace pt2rt {

namespace {

struct ErrorClass {
  ErrorCode code;
  int exit_code;           // pt2run's exit code, and the C API's pt2rt_status
  const char* name;        // in messages: "pt2run: error (ops library): ..."
  const char* identifier;  // pt2rt_status_name()
};

constexpr ErrorClass kClasses[] = {
    {ErrorCode::Usage, 2, "usage", "usage"},
    {ErrorCode::Package, 3, "package", "package"},
    {ErrorCode::OpsLibrary, 4, "ops library", "ops_library"},
    {ErrorCode::Input, 5, "input", "input"},
    {ErrorCode::IO, 6, "I/O", "io"},
    {ErrorCode::Runtime, 7, "runtime", "runtime"},
};

const ErrorClass& class_of(ErrorCode code) {
  for (const auto& c : kClasses) {
    if (c.code == code) return c;
  }
  return kClasses[5];  // Runtime: anything unexpected
}

}  // namespace

int exit_code(ErrorCode code) { return class_of(code).exit_code; }

const char* error_code_name(ErrorCode code) { return class_of(code).name; }

const char* detail::status_identifier(int exit_code) {
  if (exit_code == 0) return "ok";
  for (const auto& c : kClasses) {
    if (c.exit_code == exit_code) return c.identifier;
  }
  return "unknown";
}

}  // namespace pt2rt
