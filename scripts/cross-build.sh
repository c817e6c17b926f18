#!/usr/bin/env bash
# Cross-builds the runtime, pt2run, the ops libraries and the C++ tests for TARGET (linux-aarch64) into
# build/aarch64-release, after installing what that needs: Debian's cross compiler, qemu-user and the target's
# libssl-dev (multiarch), PyPI's aarch64 torch wheels (for the libtorch recipe), then Conan with
# profiles/linux-aarch64. The native build comes first: the cross build's tests export packages with it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TARGET=${TARGET:-linux-aarch64}
if [ "$TARGET" != linux-aarch64 ]; then
  echo "error: TARGET must be linux-aarch64 (the one cross target), got '$TARGET'" >&2
  exit 2
fi
if [ "$FLAVOUR" != cpu ]; then
  echo "error: the linux-aarch64 build is CPU only; got FLAVOUR=$FLAVOUR" >&2
  exit 2
fi
"$ROOT/scripts/build.sh"
NATIVE_BUILD_DIR=$BUILD_DIR
CROSS_BUILD_DIR=$ROOT/build/aarch64-$build_type_lc

# Debian packages: the cross toolchain, qemu, the target's OpenSSL and Sleef (arm64 multiarch) ----------------------
# (apt upgrades the native libssl-dev with the arm64 one: Multi-Arch packages of both must be one version)
ensure_debian_packages g++-aarch64-linux-gnu qemu-user libssl-dev:arm64 libsleef-dev:arm64  # Sleef: pt2rt-lite

# PyPI's aarch64 wheels (the libtorch recipe checks their SHA-256) -----------------------------------------------
# one download per machine, not per clone (~440 MB; the recipe checks each file's SHA-256)
WHEELS=${PT2RT_WHEELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pt2rt/wheels-linux-aarch64}
mkdir -p "$WHEELS"
wanted=(torch==2.13.0 nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85)
if ! compgen -G "$WHEELS/torch-2.13.0-*aarch64.whl" >/dev/null || ! compgen -G "$WHEELS/nvidia_cuda_runtime-13.0.96-*.whl" >/dev/null \
   || ! compgen -G "$WHEELS/nvidia_cuda_cupti-13.0.85-*.whl" >/dev/null; then
  log "pip download ${wanted[*]} (linux-aarch64) -> $WHEELS"
  "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_aarch64 --platform manylinux_2_25_aarch64 --platform manylinux_2_17_aarch64 \
    --platform manylinux2014_aarch64 -d "$WHEELS" "${wanted[@]}"
fi
# The same wheel's libtorch where export --target linux-aarch64 finds it with no settings (export_tools/targets.py)
fetched=$("$PYTHON" -m export_tools -q fetch-target linux-aarch64 --wheel "$(compgen -G "$WHEELS/torch-2.13.0-*aarch64.whl" | head -1)")

# Conan: the same recipes, the target's settings ----------------------------------------------------------------
conan=$VENV/bin/conan
conan_stamp=$CROSS_BUILD_DIR/.pt2rt-conan
conan_inputs=$( (echo "$CONAN_HOME"; cat "$ROOT/conanfile.py" "$ROOT/profiles/linux-aarch64" $(find "$ROOT/recipes" "$ROOT/export_tools/cmake" -type f | sort)) | sha256sum | cut -d' ' -f1)
if [ ! -f "$CROSS_BUILD_DIR/generators/conan_toolchain.cmake" ] || [ "$(cat "$conan_stamp" 2>/dev/null)" != "$conan_inputs" ]; then
  log "conan install (linux-aarch64)"
  LIBTORCH_WHEELS_DIR=$WHEELS "$conan" install "$ROOT" -r "$CONAN_REMOTE" --build=missing \
    -pr:h "$ROOT/profiles/linux-aarch64" -pr:b default -s:h build_type="$BUILD_TYPE" \
    -o "&:flavour=cpu" -o "&:with_tests=True" >"$ROOT/build/conan-aarch64.log" 2>&1 \
    || { tail -40 "$ROOT/build/conan-aarch64.log" >&2; echo "error: conan install failed; full log: build/conan-aarch64.log" >&2; exit 1; }
  echo "$conan_inputs" >"$conan_stamp"
  rm -f "$CROSS_BUILD_DIR/CMakeCache.txt"  # configure afresh against the new packages (CMake caches Torch_DIR)
fi
preset=conan-aarch64-$build_type_lc
if [ ! -f "$CROSS_BUILD_DIR/CMakeCache.txt" ]; then
  log "cmake --preset $preset"
  (cd "$ROOT" && cmake --preset "$preset" -DPT2RT_NATIVE_BUILD_DIR="$NATIVE_BUILD_DIR" >/dev/null)
fi
log "cmake --build --preset $preset"
(cd "$ROOT" && cmake --build --preset "$preset")
log "the aarch64 libtorch export --target linux-aarch64 links against: $fetched"
