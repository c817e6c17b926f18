#!/usr/bin/env bash
# make lite: pt2rt-lite alone (no torch) -> dist-lite/: lib/libpt2rt.so and libpt2rt.a, lib/libsleef.so.3,
# bin/pt2run, include/pt2rt/, lib/cmake/pt2rt. Then checks it: at most 10 MB, no file names libtorch, libc10 or
# libpython, and its pt2run runs. PT2RT_LITE_BUILD_DIR / PT2RT_LITE_DIST put the build and the bundle elsewhere.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/bootstrap.sh"  # the Debian packages (Sleef) and Conan's toolchain (nlohmann_json, CLI11)
use_ccache
build=${PT2RT_LITE_BUILD_DIR:-$ROOT/build/lite}
dist=${PT2RT_LITE_DIST:-$ROOT/dist-lite}
log "cmake: pt2rt-lite alone -> $build"
cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPT2RT_LITE_ONLY=ON \
  -DCMAKE_TOOLCHAIN_FILE="$BUILD_DIR/generators/conan_toolchain.cmake" >/dev/null
cmake --build "$build"
rm -rf "$dist"
cmake --install "$build" --prefix "$dist" >/dev/null
# the bundle ships stripped: debug info is half of it and nothing at run time reads it
find "$dist/lib" "$dist/bin" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-unneeded {} +
strip --strip-debug "$dist/lib/libpt2rt.a"
log "check $dist"
bytes=$(du -sb "$dist" | cut -f1)
limit=$((10 * 1000 * 1000))
for f in "$dist"/lib/*.so* "$dist"/bin/*; do
  if readelf -d "$f" | grep -E 'NEEDED.*(torch|c10|python)'; then
    echo "error: $f needs torch or python" >&2
    exit 1
  fi
done
"$dist/bin/pt2run" host >/dev/null
echo "dist-lite: $((bytes / 1000)) kB in $dist (limit $((limit / 1000)) kB)"
[ "$bytes" -le "$limit" ] || { echo "error: $dist is $bytes bytes, over the 10 MB goal" >&2; exit 1; }
