// What we ship must run where no Python exists: no libpython / libtorch_python among its needs.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "";
  std::string out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  return out;
}

std::vector<std::string> shipped() {
  std::vector<std::string> files;
  std::stringstream list(PT2RT_SHIPPED_BINARIES);
  for (std::string f; std::getline(list, f, ':');) files.push_back(f);  // ':'-separated
  return files;
}

TEST(NoLibpython, DynamicSectionNeedsNoPython) {
  for (const auto& file : shipped()) {
    const std::string needed = run("readelf -d '" + file + "' 2>&1");
    ASSERT_NE(needed.find("(NEEDED)"), std::string::npos) << "readelf could not read " << file << ":\n" << needed;
    EXPECT_EQ(needed.find("python"), std::string::npos) << file << " needs Python:\n" << needed;
  }
}

TEST(NoLibpython, NoLoadedDependencyIsPython) {
  for (const auto& file : shipped()) {
    const std::string deps = run("ldd '" + file + "' 2>&1");
    ASSERT_NE(deps.find("libc10.so"), std::string::npos) << "ldd could not resolve " << file << ":\n" << deps;
    EXPECT_EQ(deps.find("python"), std::string::npos) << file << " pulls in Python:\n" << deps;
  }
}

}  // namespace
