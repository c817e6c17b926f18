// What we ship must run where no Python exists: no libpython / libtorch_python among its needs.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "test_shell.h"

namespace {

std::string run(const std::string& command) { return test_shell::output(command); }

std::vector<std::string> shipped() {
  std::vector<std::string> files;
  std::stringstream list(PT2RT_SHIPPED_BINARIES);
  for (std::string f; std::getline(list, f, ':');) files.push_back(f);  // ':'-separated
  return files;
}

// The names of what a file needs, not the paths they are found at: a libtorch from a wheel lives under a
// ".../python3.X/site-packages" folder, which is no dependency on Python.
std::string needed_names(const std::string& readelf) {
  std::string names;
  std::stringstream lines(readelf);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("(NEEDED)") != std::string::npos) names += line.substr(line.find('[')) + "\n";
  }
  return names;
}

std::string loaded_names(const std::string& ldd) {
  std::string names;
  std::stringstream lines(ldd);
  for (std::string line; std::getline(lines, line);) {
    std::stringstream words(line);
    std::string soname;
    words >> soname;
    names += soname + "\n";
  }
  return names;
}

TEST(NoLibpython, DynamicSectionNeedsNoPython) {
  for (const auto& file : shipped()) {
    const std::string readelf = run("readelf -d '" + file + "' 2>&1");
    const std::string needed = needed_names(readelf);
    ASSERT_NE(needed.find("libc.so"), std::string::npos) << "readelf could not read " << file << ":\n" << readelf;
    EXPECT_EQ(needed.find("python"), std::string::npos) << file << " needs Python:\n" << needed;
  }
}

TEST(NoLibpython, LibstdcxxComesBeforeTorchAmongTheDependencies) {
  // torch's wheels export copies of libstdc++ functions (torch 2.11's CUDA libtorch.so has a std::filesystem
  // whose remove_all calls a null function): libstdc++ first makes every binary of ours bind to the system's.
  for (const auto& file : shipped()) {
    const std::string needed = needed_names(run("readelf -d '" + file + "' 2>&1"));
    const size_t stdcxx = needed.find("[libstdc++.so");
    ASSERT_NE(stdcxx, std::string::npos) << file << ":\n" << needed;
    for (const char* torch : {"[libtorch", "[libc10"}) {
      const size_t at = needed.find(torch);
      if (at != std::string::npos) EXPECT_GT(at, stdcxx) << file << " needs " << torch << " first:\n" << needed;
    }
  }
}

TEST(NoLibpython, NoLoadedDependencyIsPython) {
  for (const auto& file : shipped()) {
    const std::string deps = run("ldd '" + file + "' 2>&1");
    ASSERT_NE(deps.find("libc10.so"), std::string::npos) << "ldd could not resolve " << file << ":\n" << deps;
    EXPECT_EQ(loaded_names(deps).find("python"), std::string::npos) << file << " pulls in Python:\n" << deps;
  }
}

}  // namespace
