#!/usr/bin/env bash
# Builds our code with AddressSanitizer + UndefinedBehaviorSanitizer (build/<flavour>-asan) and runs the C++
# tests under them: gtest suites, the pt2run bad-input matrix and the soak. A sanitizer report fails the run.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/bootstrap.sh"
ASAN_DIR=$ROOT/build/$FLAVOUR-asan
if [ ! -f "$ASAN_DIR/CMakeCache.txt" ]; then
  log "cmake (ASan + UBSan) -> build/$FLAVOUR-asan"
  # the Conan toolchain of the regular build gives the same dependencies
  cmake -S "$ROOT" -B "$ASAN_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$BUILD_DIR/generators/conan_toolchain.cmake" \
    -DPT2RT_SANITIZE=ON -DPT2RT_PYTHON="$PYTHON" -DOPS_CUDA=OFF >/dev/null
fi
log "cmake --build build/$FLAVOUR-asan"
cmake --build "$ASAN_DIR"
# halt_on_error: the first report fails the test; leaks are checked (LeakSanitizer) in our processes.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1
export LSAN_OPTIONS=suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0  # libtorch's own, with reasons
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
log "ctest under ASan + UBSan ($FLAVOUR)"
ctest --test-dir "$ASAN_DIR" --output-on-failure -j "$(nproc)"
