// What one input gives each fuzz target: "ok..." or "error: <message>". libFuzzer (libfuzzer_entry.cpp) only
// needs it not to crash; the replay compares it with tests/fuzz/expected/<target>.txt, so a parser that rejected
// everything (or accepted what it must refuse) fails make test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

std::string pt2rt_fuzz_outcome(const uint8_t* data, size_t size);
