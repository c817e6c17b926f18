#!/usr/bin/env bash
# make lite: pt2rt-lite alone (no torch) -> dist-lite/: lib/libpt2rt.so and libpt2rt.a, lib/libsleef.so.3,
# bin/pt2run, include/pt2rt/, lib/cmake/pt2rt. Then checks it: at most 10 MB, no file names libtorch, libc10 or
# libpython, and its pt2run runs. LITE_TARGET=linux-aarch64 (make lite TARGET=linux-aarch64): the same for aarch64
# with Debian's cross toolchain -> dist-lite-linux-aarch64/, its pt2run run under qemu. PT2RT_LITE_BUILD_DIR /
# PT2RT_LITE_DIST put the build and the bundle elsewhere.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
target=${LITE_TARGET:-}
case "$target" in
  "") suffix="" ;;
  linux-aarch64) suffix=-linux-aarch64 ;;
  *) echo "error: TARGET must be linux-aarch64 (or unset: this machine), got '$target'" >&2; exit 2 ;;
esac
"$ROOT/scripts/bootstrap.sh"  # the Debian packages (Sleef) and Conan's toolchain (nlohmann_json, CLI11)
build=${PT2RT_LITE_BUILD_DIR:-$ROOT/build/lite$suffix}
dist=${PT2RT_LITE_DIST:-$ROOT/dist-lite$suffix}
strip=strip
run=()
if [ -z "$target" ]; then
  toolchain=(-DCMAKE_TOOLCHAIN_FILE="$BUILD_DIR/generators/conan_toolchain.cmake")
else
  # the cross toolchain and the target's OpenSSL and Sleef (Debian multiarch); nlohmann_json and CLI11 are headers,
  # the native Conan install's serve
  ensure_debian_packages g++-aarch64-linux-gnu qemu-user libssl-dev:arm64 libsleef-dev:arm64
  toolchain=(-DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/linux-aarch64.cmake"
             -DCMAKE_PREFIX_PATH="$BUILD_DIR/generators" -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH)
  export PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig  # FindOpenSSL asks pkg-config
  strip=aarch64-linux-gnu-strip
  run=(env PT2RT_QEMU_LIBRARY_PATH=/usr/lib/aarch64-linux-gnu "$ROOT/scripts/qemu-aarch64.sh")
fi
log "cmake: pt2rt-lite alone${target:+ for $target} -> $build"
cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPT2RT_LITE_ONLY=ON "${toolchain[@]}" >/dev/null
cmake --build "$build"
rm -rf "$dist"
cmake --install "$build" --prefix "$dist" >/dev/null
# the bundle ships stripped: debug info is half of it and nothing at run time reads it
find "$dist/lib" "$dist/bin" -type f \( -name '*.so*' -o -perm -u+x \) -exec "$strip" --strip-unneeded {} +
"$strip" --strip-debug "$dist/lib/libpt2rt.a"
log "check $dist"
bytes=$(du -sb "$dist" | cut -f1)
limit=$((10 * 1000 * 1000))
for f in "$dist"/lib/*.so* "$dist"/bin/*; do
  if readelf -d "$f" | grep -E 'NEEDED.*(torch|c10|python)'; then
    echo "error: $f needs torch or python" >&2
    exit 1
  fi
done
"${run[@]}" "$dist/bin/pt2run" host >/dev/null
echo "dist-lite$suffix: $((bytes / 1000)) kB in $dist (limit $((limit / 1000)) kB)"
[ "$bytes" -le "$limit" ] || { echo "error: $dist is $bytes bytes, over the 10 MB goal" >&2; exit 1; }
