// Files and folders, as both runtimes find ops libraries (ops_libraries.cpp, lite/ops_libraries.cpp).
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <sstream>

#include "common.h"

namespace pt2rt::detail {

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string absolute_path(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : path;
}

std::string dirname_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::vector<std::string> ops_search_path(const std::string& own_dir, const std::string& package_path,
                                         bool package_dir) {
  std::vector<std::string> dirs;
  if (!own_dir.empty()) dirs.push_back(own_dir);
  if (const char* env = std::getenv("PT2RT_OPS_PATH")) {
    std::stringstream list(env);
    for (std::string dir; std::getline(list, dir, ':');)
      if (!dir.empty()) dirs.push_back(dir);
  }
  if (package_dir && !package_path.empty()) dirs.push_back(dirname_of(package_path));  // none: from memory
  return dirs;
}

}  // namespace pt2rt::detail
