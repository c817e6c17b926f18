#!/usr/bin/env bash
# Fills build/gpu-deps with what the runtime needs besides torch, for a machine without Conan (the GPU check):
# the nlohmann_json and CLI11 headers of the regular build's Conan packages, OpenSSL's headers and libcrypto.so.3
# (used there only when that machine has no OpenSSL of its own). Carry build/gpu-deps to that machine; gpu-check.sh
# then builds libpt2rt and pt2run with -DPT2RT_DEPS_DIR=build/gpu-deps. Needs a regular build (make build) first.
# TRIPLET=aarch64-linux-gnu: the same for a cross build without Conan (build/deps-linux-aarch64; OpenSSL from Debian's
# libssl-dev:arm64, which scripts/cross-build.sh installs).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRIPLET=${TRIPLET:-x86_64-linux-gnu}
if [ "$TRIPLET" = x86_64-linux-gnu ]; then DEST=$ROOT/build/gpu-deps; else DEST=$ROOT/build/deps-linux-${TRIPLET%%-*}; fi
GEN=$ROOT/build/cpu-release/generators
folder() {  # the Conan package folder a generated <name>-release-x86_64-data.cmake names (absolute, or relative to it)
  local data=$GEN/$1-release-x86_64-data.cmake path
  [ -f "$data" ] || { echo "error: $data not found: run make build first" >&2; exit 1; }
  path=$(sed -n "s/^set($2_PACKAGE_FOLDER_RELEASE \"\(.*\)\")/\1/p" "$data")
  path=${path//'${CMAKE_CURRENT_LIST_DIR}'/$GEN}
  [ -d "$path" ] || { echo "error: no Conan package folder for $1 (from $data: '$path')" >&2; exit 1; }
  echo "$path"
}
rm -rf "$DEST"
mkdir -p "$DEST/include" "$DEST/lib"
cp -r "$(folder nlohmann_json nlohmann_json)/include/nlohmann" "$DEST/include/"
cp -r "$(folder CLI11 cli11)/include/CLI" "$DEST/include/"
[ -d /usr/include/openssl ] || { echo "error: OpenSSL headers not found (apt-get install libssl-dev)" >&2; exit 1; }
cp -r /usr/include/openssl "$DEST/include/"
cp /usr/include/$TRIPLET/openssl/*.h "$DEST/include/openssl/" 2>/dev/null || true
[ -f /usr/lib/$TRIPLET/libcrypto.so.3 ] || { echo "error: no /usr/lib/$TRIPLET/libcrypto.so.3 (libssl-dev of that arch)" >&2; exit 1; }
cp -L /usr/lib/$TRIPLET/libcrypto.so.3 "$DEST/lib/"
log "$(du -sh "$DEST" | cut -f1) in $DEST"
