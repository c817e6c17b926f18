// libFuzzer's entry point for every target: it only needs the outcome not to crash or throw anything else.
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)pt2rt_fuzz_outcome(data, size);
  return 0;
}
