#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (preset cpu-fuzz -> build/cpu-fuzz) and runs each for FUZZ_SECONDS
# (default 30) on the committed seed corpus and regressions. A finding fails the run and is left in
# build/cpu-fuzz/fuzz-findings/; copy it to tests/fuzz/regressions/<target>/ once fixed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FLAVOUR=cpu "$ROOT/scripts/bootstrap.sh"
FUZZ_DIR=$ROOT/build/cpu-fuzz
log "cmake --preset cpu-fuzz -> build/cpu-fuzz"
cmake --preset cpu-fuzz -DPT2RT_FUZZ_SECONDS="${FUZZ_SECONDS:-30}" >/dev/null
log "cmake --build build/cpu-fuzz (fuzz targets)"
cmake --build "$FUZZ_DIR" --target fuzz_spec fuzz_tensors fuzz_golden fuzz_infer_request fuzz_grpc_request fuzz_http_codec
export ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0  # see scripts/sanitize.sh
export LSAN_OPTIONS=suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1
log "fuzzing, ${FUZZ_SECONDS:-30} s per target"
ctest --test-dir "$FUZZ_DIR" --output-on-failure --no-tests=error -R '^fuzz_' -j "$(nproc)"  # one core per fuzzer
