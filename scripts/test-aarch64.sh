#!/usr/bin/env bash
# The linux-aarch64 leg of make test: cross-build (scripts/cross-build.sh), then under qemu the C++ tests that need
# no Python (ctest of build/aarch64-release), and tests/aarch64: packages exported here for aarch64 (and one for
# both arches) verified and run by the cross-built pt2run, compared with this machine's eager output; then the bundle
# (scripts/bundle.sh), pt2rt-lite's aarch64 bundle (make lite TARGET=linux-aarch64) running lite packages, and the
# same runtime cross-built without Conan (cmake/toolchains/linux-aarch64.cmake) running
# the bundle's package.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/cross-build.sh"
CROSS_BUILD_DIR=$ROOT/build/aarch64-$build_type_lc
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$CROSS_BUILD_DIR/CMakeCache.txt")
torch_prefix=$(cd "$torch_dir/../../.." && pwd)
# the exports below find the aarch64 libtorch as a user's do: the one cross-build.sh fetched (fetch-target)
unset PT2RT_TORCH_LINUX_AARCH64
status=0
log "ctest (linux-aarch64, under qemu)"
ctest --test-dir "$CROSS_BUILD_DIR" --output-on-failure --no-tests=error -j "$(nproc)" || status=1
log "make lite TARGET=linux-aarch64 (dist-lite-linux-aarch64: tests/aarch64 runs lite packages with it)"
LITE_TARGET=linux-aarch64 "$ROOT/scripts/lite.sh" || status=1
log "pytest tests/aarch64 (packages exported here, run under qemu)"
(cd "$ROOT" && IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so PT2RT_CROSS_BUILD_DIR=$CROSS_BUILD_DIR \
  PT2RT_NATIVE_BUILD_DIR=$BUILD_DIR "$PYTHON" -m pytest -q -p no:cacheprovider tests/aarch64) || status=1

log "make bundle TARGET=linux-aarch64"
TARGET=linux-aarch64 "$ROOT/scripts/bundle.sh" || status=1

log "plain CMake cross build (cmake/toolchains/linux-aarch64.cmake, no Conan) -> build/aarch64-cmake"
TRIPLET=aarch64-linux-gnu "$ROOT/scripts/gpu-deps.sh" >/dev/null
plain=$ROOT/build/aarch64-cmake
if [ ! -f "$plain/CMakeCache.txt" ]; then
  cmake -S "$ROOT" -B "$plain" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/linux-aarch64.cmake" \
    -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DCMAKE_PREFIX_PATH="$torch_prefix" \
    -DPT2RT_DEPS_DIR="$ROOT/build/deps-linux-aarch64" -DPT2RT_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$plain" >/dev/null || status=1
# the bundle's package (exported for aarch64 just above), run by this build's pt2run and ops library
PT2RT_OPS_PATH=$plain/lib "$ROOT/scripts/qemu-aarch64.sh" "$plain/bin/pt2run" verify \
  "$ROOT/dist-linux-aarch64/models/identity_conv_net.pt2" || status=1
exit $status
