// Runs a fuzz target over files without libFuzzer: the seed corpus and the regressions, in every build
// (make test, make sanitize), and checks what each gives against a list of expected outcomes.
//   replay_<target> --expect LIST FILE_OR_DIR...   LIST: one "<file name> <glob>" per line ('#' comments)
//   replay_<target> --print FILE_OR_DIR...         prints each file's outcome (to write a LIST from)
// Fails when it found nothing to run, when a file has no expectation, or when an outcome does not match its glob.
#include "fuzz.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::map<std::string, std::string> expected;
  bool print = false;
  bool have_list = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--print") == 0) {
      print = true;
      continue;
    }
    if (std::strcmp(argv[i], "--expect") == 0 && i + 1 < argc) {
      std::ifstream list(argv[++i]);
      if (!list) {
        std::fprintf(stderr, "error: cannot read the expectations %s\n", argv[i]);
        return 2;
      }
      have_list = true;
      for (std::string line; std::getline(list, line);) {
        if (line.empty() || line[0] == '#') continue;
        const auto space = line.find(' ');
        if (space == std::string::npos) {
          std::fprintf(stderr, "error: %s: expected '<file name> <glob>', got '%s'\n", argv[i], line.c_str());
          return 2;
        }
        expected[line.substr(0, space)] = line.substr(line.find_first_not_of(' ', space));
      }
      continue;
    }
    const fs::path arg(argv[i]);
    if (fs::is_directory(arg)) {
      for (const auto& e : fs::directory_iterator(arg))
        if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
    } else if (fs::is_regular_file(arg)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "error: %s is neither a file nor a directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "error: no inputs to replay\n");
    return 2;
  }
  if (!print && !have_list) {
    std::fprintf(stderr, "error: give --expect LIST (or --print)\n");
    return 2;
  }
  int failed = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = f.filename().string();
    const std::string outcome = pt2rt_fuzz_outcome(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (print) {
      std::printf("%s %s\n", name.c_str(), outcome.c_str());
      continue;
    }
    const auto it = expected.find(name);
    if (it == expected.end()) {
      std::fprintf(stderr, "FAIL %s: no expected outcome listed (it gave: %s)\n", name.c_str(), outcome.c_str());
      ++failed;
    } else if (fnmatch(it->second.c_str(), outcome.c_str(), 0) != 0) {
      std::fprintf(stderr, "FAIL %s:\n  expected: %s\n  got:      %s\n", name.c_str(), it->second.c_str(),
                   outcome.c_str());
      ++failed;
    } else {
      std::fprintf(stderr, "ok   %s: %s\n", name.c_str(), outcome.c_str());
    }
  }
  if (print) return 0;
  std::printf("replayed %zu inputs, %d not as expected\n", files.size(), failed);
  return failed ? 1 : 0;
}
