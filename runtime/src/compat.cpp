// What differs between the torch versions the runtime supports, in one place (export_tools/compat.py is its twin;
// the two rules must agree). Supported: torch 2.11 through 2.15.
//
// Which package loads under which torch: the model library calls libtorch only through AOTInductor's C shim,
// whose functions are kept for old model libraries and added to (never changed) for new ones
// (torch/csrc/inductor/aoti_torch/c/shim.h). So a package made by torch 2.X runs under libtorch 2.Y for Y >= X;
// one made by a newer torch may call what this libtorch lacks, and its layout may be one this loader cannot read.
#include "internal.h"

#include <cstdio>

#include <torch/headeronly/version.h>

namespace pt2rt {

namespace {

constexpr int kOldestMinor = 11;  // 2.11

struct Release {
  int major = -1, minor = -1, patch = -1;
};

// "2.13.0+cpu" -> {2, 13, 0}; {-1, -1, -1} when it is no version.
Release parse(const std::string& version) {
  Release r;
  char tail = 0;
  if (std::sscanf(version.c_str(), "%d.%d.%d%c", &r.major, &r.minor, &r.patch, &tail) < 3 || r.major < 0 ||
      r.minor < 0 || r.patch < 0 || (tail != 0 && tail != '+' && tail != 'a' && tail != 'r' && tail != '.')) {
    return Release{};
  }
  return r;
}

}  // namespace

const char* torch_version() {
  static const std::string v = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                               std::to_string(TORCH_VERSION_PATCH);
  return v.c_str();
}

namespace detail {

std::string why_not_loadable(const std::string& package_torch, const std::string& runtime_torch) {
  const Release made = parse(package_torch), here = parse(runtime_torch);
  if (made.major < 0) return "the package names no torch version it was exported with (got '" + package_torch + "')";
  const std::string both = "the package was exported with torch " + package_torch;
  if (made.major != here.major || made.minor > here.minor) {
    return both + ", newer than this runtime's torch " + runtime_torch +
           ": AOTInductor runs a package under the torch that made it or a newer one (export it with torch " +
           std::to_string(here.major) + "." + std::to_string(here.minor) + " or older)";
  }
  if (made.major == 2 && made.minor < kOldestMinor) {
    return both + ", older than the oldest supported torch 2." + std::to_string(kOldestMinor) +
           " (export it again; this runtime's torch is " + runtime_torch + ")";
  }
  return "";
}

}  // namespace detail
}  // namespace pt2rt
