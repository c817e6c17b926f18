// What one input gives each fuzz target: "ok..." or "error: <message>". libFuzzer (libfuzzer_entry.cpp) only
// needs it not to crash; the replay compares it with tests/fuzz/expected/<target>.txt, so a parser that rejected
// everything (or accepted what it must refuse) fails make test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

std::string pt2rt_fuzz_outcome(const uint8_t* data, size_t size);

// FNV-1a of bytes as 8 hex digits: outcomes name what a parser produced by this hash of its bytes.
inline std::string pt2rt_fuzz_hash(std::string_view bytes) {
  uint32_t h = 2166136261u;
  for (unsigned char c : bytes) h = (h ^ c) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", h);
  return hex;
}
