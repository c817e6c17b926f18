#!/usr/bin/env bash
# The linux-aarch64 leg of make test: cross-build (scripts/cross-build.sh), then under qemu the C++ tests that need
# no Python (ctest of build/aarch64-release), and tests/aarch64: packages exported here for aarch64 (and one for
# both arches) verified and run by the cross-built pt2run, compared with this machine's eager output.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/cross-build.sh"
CROSS_BUILD_DIR=$ROOT/build/aarch64-$build_type_lc
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$CROSS_BUILD_DIR/CMakeCache.txt")
export PT2RT_TORCH_LINUX_AARCH64=$(cd "$torch_dir/../../.." && pwd)
status=0
log "ctest (linux-aarch64, under qemu)"
ctest --test-dir "$CROSS_BUILD_DIR" --output-on-failure --no-tests=error -j "$(nproc)" || status=1
log "pytest tests/aarch64 (packages exported here, run under qemu)"
(cd "$ROOT" && IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so PT2RT_CROSS_BUILD_DIR=$CROSS_BUILD_DIR \
  PT2RT_NATIVE_BUILD_DIR=$BUILD_DIR "$PYTHON" -m pytest -q -p no:cacheprovider tests/aarch64) || status=1
exit $status
