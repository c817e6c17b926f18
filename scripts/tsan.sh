#!/usr/bin/env bash
# The concurrent-loading tests (tests/cpp/test_loading.cpp), runs reusing their memory from several threads
# (Runtime.ReusedRunMemory*) and the recurrence's steps split across threads (test_kernels) with our code under
# ThreadSanitizer (build/cpu-tsan). libtorch and libgomp are not instrumented: one intra-op thread (no OpenMP team whose
# synchronisation TSan cannot see), and reports from inside libtorch are suppressed (tests/sanitizers/tsan.supp).
# A report in our code fails the run.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$FLAVOUR" = cpu ] || { echo "error: make tsan runs on the cpu flavour" >&2; exit 2; }
"$ROOT/scripts/build.sh"
log "test packages of build/cpu-release"
ctest --test-dir "$BUILD_DIR" -R '^export_test_packages$' --output-on-failure --no-tests=error
TSAN_DIR=$ROOT/build/cpu-tsan
log "cmake --preset cpu-tsan -> build/cpu-tsan"
cmake --preset cpu-tsan >/dev/null
log "cmake --build build/cpu-tsan --target test_runtime test_kernels"
cmake --build "$TSAN_DIR" --target test_runtime test_kernels
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/sanitizers/tsan.supp"
log "test_runtime --gtest_filter='Loading.*' under ThreadSanitizer"
OMP_NUM_THREADS=1 "$TSAN_DIR/bin/test_runtime" --gtest_filter='Loading.*'
# a process of its own: the Loading tests expect to make the process's first extraction directory
log "test_runtime --gtest_filter='Runtime.ReusedRunMemory*' under ThreadSanitizer"
OMP_NUM_THREADS=1 "$TSAN_DIR/bin/test_runtime" --gtest_filter='Runtime.ReusedRunMemory*'
# the recurrence's steps split across threads (the members' hand-offs: atomics only)
log "test_kernels under ThreadSanitizer"
"$TSAN_DIR/bin/test_kernels"
