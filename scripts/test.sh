#!/usr/bin/env bash
# Builds, then runs every test: gtest through ctest, then pytest. Both run; either failing fails.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
status=0
log "ctest ($FLAVOUR)"
ctest --test-dir "$BUILD_DIR" --output-on-failure --no-tests=error -j "$(nproc)" || status=1
log "pytest ($FLAVOUR)"
(cd "$ROOT" && IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so "$PYTHON" -m pytest -q -p no:cacheprovider) || status=1
exit $status
