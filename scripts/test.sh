#!/usr/bin/env bash
# Builds, then runs every test: gtest through ctest, then pytest; for the cpu flavour then the emulated x86-64 host
# classes (scripts/test-x86-hosts.sh: AVX2-only, no AVX) and the linux-aarch64 leg (scripts/test-aarch64.sh:
# cross-built, run under qemu). All run; any failing fails.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
status=0
log "ctest ($FLAVOUR)"
ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j "$(nproc)" || status=1
log "pytest ($FLAVOUR)"
(cd "$ROOT" && IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so "$PYTHON" -m pytest -q -p no:cacheprovider) || status=1
if [ "$FLAVOUR" = cpu ]; then
  log "x86-64 host classes, emulated (scripts/test-x86-hosts.sh)"
  "$ROOT/scripts/test-x86-hosts.sh" || status=1
  log "linux-aarch64 (scripts/test-aarch64.sh)"
  "$ROOT/scripts/test-aarch64.sh" || status=1
fi
exit $status
