#pragma once
#include <cstdlib>
#include <string>

// What test_runtime takes from its environment, so that another host class can run it (scripts/test-x86-hosts.sh).

// The packages export_packages.py wrote: $PT2RT_TEST_PACKAGES when set (exported on that host class), else this
// build's.
inline std::string test_packages_dir() {
  const char* env = std::getenv("PT2RT_TEST_PACKAGES");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(PT2RT_TEST_PACKAGES);
}

// pt2run as the tests start it: $PT2RT_TEST_LAUNCHER (a command that runs a program there, e.g.
// "scripts/emulate-x86.sh haswell") before the binary, else the binary.
inline std::string pt2run_command() {
  const char* launcher = std::getenv("PT2RT_TEST_LAUNCHER");
  return (launcher != nullptr && *launcher != '\0' ? std::string(launcher) + " " : std::string()) + PT2RUN_BINARY;
}
