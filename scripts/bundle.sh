#!/usr/bin/env bash
# make bundle TARGET=linux-aarch64: dist-linux-aarch64/ laid out like dist/ (bin/pt2run, lib/ with libpt2rt, the ops
# library and the CPU-only libtorch it needs, include/, lib/cmake/pt2rt, models/identity_conv_net.pt2 exported for
# aarch64), relocatable (RUNPATH $ORIGIN), checked here: no libtorch_cuda, nothing needing libpython, every library
# for aarch64, the glibc it needs stated, and the package verified by the bundle's own pt2run under qemu.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TARGET=${TARGET:-}
if [ "$TARGET" != linux-aarch64 ]; then
  echo "error: make bundle takes TARGET=linux-aarch64 (got '${TARGET}'); this machine's bundle is dist/, from make demo" >&2
  exit 2
fi
"$ROOT/scripts/cross-build.sh"
CROSS_BUILD_DIR=$ROOT/build/aarch64-$build_type_lc
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$CROSS_BUILD_DIR/CMakeCache.txt")
TORCH=$(cd "$torch_dir/../../.." && pwd)
DIST=$ROOT/dist-$TARGET

log "install -> dist-$TARGET/"
rm -rf "$DIST"
cmake --install "$CROSS_BUILD_DIR" --prefix "$DIST" >/dev/null
# libtorch_cpu and what it NEEDS (the recipe packaged exactly those), the CUDA runtime stubs next to it ($ORIGIN)
cp -a "$TORCH"/lib/*.so* "$TORCH"/../nvidia/cu13/lib/*.so* "$DIST/lib/"

log "export identity_conv_net for $TARGET -> dist-$TARGET/models/"
mkdir -p "$DIST/models"
IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so "$PYTHON" -m export_tools -q export \
  --model my_ops.models:identity_conv_net --out "$DIST/models/identity_conv_net.pt2" --dynamic-batch 1:32 \
  --target "$TARGET"

log "check dist-$TARGET/"
readelf=aarch64-linux-gnu-readelf
bad=0
glibc=""
glibcxx=""
while IFS= read -r -d '' f; do
  header=$("$readelf" -h "$f" 2>/dev/null) || continue  # not an ELF file
  if ! echo "$header" | grep -q 'Machine:.*AArch64'; then echo "error: $f is not an aarch64 binary" >&2; bad=1; fi
  needed=$("$readelf" -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  if echo "$needed" | grep -Eq 'libpython|libtorch_cuda|libc10_cuda'; then
    echo "error: $f needs $(echo "$needed" | grep -E 'libpython|libtorch_cuda|libc10_cuda' | paste -sd' ')" >&2; bad=1
  fi
  glibc+=$'\n'$("$readelf" -V "$f" | { grep -o 'GLIBC_[0-9.]*' || true; } | sort -u)
  glibcxx+=$'\n'$("$readelf" -V "$f" | { grep -o 'GLIBCXX_[0-9.]*' || true; } | sort -u)
done < <(find "$DIST/bin" "$DIST/lib" -type f -print0)
if find "$DIST" -name 'libtorch_cuda*' | grep -q .; then echo "error: libtorch_cuda in the bundle" >&2; bad=1; fi
[ $bad -eq 0 ] || exit 1
floor=$(echo "$glibc" | grep -o '[0-9][0-9.]*' | sort -V | tail -1)
cxx_floor=$(echo "$glibcxx" | grep -o '[0-9][0-9.]*' | sort -V | tail -1)
echo "dist-$TARGET: $(du -sm "$DIST" | cut -f1) MiB; needs glibc >= $floor, libstdc++ with GLIBCXX_$cxx_floor, libcrypto.so.3"

log "the bundle's own pt2run under qemu, moved elsewhere (system libraries only besides the bundle)"
moved=$(mktemp -d /tmp/pt2rt-bundle.XXXXXX)
trap 'rm -rf "$moved"' EXIT
cp -al "$DIST" "$moved/bundle"  # hard links: the bundle's own paths are not involved
PT2RT_QEMU_LIBRARY_PATH=/usr/lib/aarch64-linux-gnu "$ROOT/scripts/qemu-aarch64.sh" "$moved/bundle/bin/pt2run" verify \
  "$moved/bundle/models/identity_conv_net.pt2"
