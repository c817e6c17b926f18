#!/usr/bin/env bash
# Builds, then runs every test: gtest through ctest, then pytest; for the cpu flavour then the emulated x86-64 host
# classes (scripts/test-x86-hosts.sh: AVX2-only, no AVX) and the linux-aarch64 leg (scripts/test-aarch64.sh:
# cross-built, run under qemu). All run; any failing fails.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
status=0
log "ctest ($FLAVOUR)"
ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j "$(nproc)" || status=1
# The cuda flavour on a machine without a GPU: pytest's files whose outcome depends on the torch build (the ops
# library and its Python package, export and the CLI); the rest is the cpu flavour's code on the same CPU.
# PYTEST_SET=all runs every file in either flavour.
pytest_args=()
if [ "$FLAVOUR" = cuda ] && [ "${PYTEST_SET:-}" != all ] && ! "$PYTHON" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  pytest_args=(ops/tests tests/python/test_export.py tests/python/test_cli.py)
fi
# a file's tests stay on one worker (its module fixtures, a server say, are set up once); a worker per core
if "$PYTHON" -c 'import xdist' 2>/dev/null; then
  pytest_args=(-n "$(nproc)" --dist loadfile "${pytest_args[@]}")
fi
log "pytest ($FLAVOUR${pytest_args:+: ${pytest_args[*]}})"
# PT2RT_TEST_PACKAGES_DIR: what ctest exported just now, which pytest's `exported` takes where it asks the same
(cd "$ROOT" && IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so \
   PT2RT_KERNELS_LIBRARY=$BUILD_DIR/lib/libpt2rt_kernels.so PT2RT_LITE_LIBRARY=$BUILD_DIR/lib/libpt2rt_lite.so \
   PT2RT_TEST_PACKAGES_DIR=$BUILD_DIR/test-packages "$PYTHON" -m pytest -q -p no:cacheprovider \
   --durations=15 --durations-min=10 "${pytest_args[@]}") || status=1
if [ "$FLAVOUR" = cpu ]; then
  log "x86-64 host classes, emulated (scripts/test-x86-hosts.sh; every gtest there: make test-x86-hosts)"
  X86_HOSTS_SET=subset "$ROOT/scripts/test-x86-hosts.sh" || status=1
  log "linux-aarch64 (scripts/test-aarch64.sh)"
  "$ROOT/scripts/test-aarch64.sh" || status=1
fi
exit $status
