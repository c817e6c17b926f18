// The gtest main of the cross-built test binaries, which run under qemu-user (docs/edge.md, "Exit under qemu"):
// once the results are written the process ends with _Exit, without running static destructors. Under qemu-user
// 7.2 the aarch64 libtorch's own static destructors found the heap corrupt at exit in some heap layouts (set by
// the lengths of TMPDIR and the environment), after every test had passed; natively no layout does. Native builds
// keep gtest's own main, so their exit path stays tested (and checked by LeakSanitizer in make sanitize).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  std::fflush(nullptr);
  std::_Exit(result);
}
