#!/usr/bin/env bash
# Installs everything the project needs, idempotently: Debian packages, the flavour's venv, Conan packages.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Debian packages -------------------------------------------------------------------------------
APT_PACKAGES=(build-essential cmake ninja-build binutils git libssl-dev googletest libgtest-dev libgmock-dev
              libcli11-dev nlohmann-json3-dev libbenchmark-dev libevent-dev zlib1g-dev libbrotli-dev
              libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler python3-venv iproute2 openssl
              clang libclang-rt-14-dev  # clang: libFuzzer targets (make fuzz)
              libc++-dev libc++abi-dev mono-mcs mono-runtime rustc cargo  # the C API's consumers (make test)
              qemu-user  # other host classes, emulated: x86-64 without AVX-512 or AVX, aarch64 (make test)
              ccache)  # compiler cache shared by every build tree and clone (scripts/lib.sh)
ensure_debian_packages "${APT_PACKAGES[@]}"
if [ "$FLAVOUR" = cuda ] && [ ! -x "$CUDA_ROOT/bin/nvcc" ]; then
  echo "error: the cuda flavour needs nvcc at $CUDA_ROOT/bin/nvcc (set CUDA_ROOT to the CUDA 13 toolkit)" >&2
  exit 1
fi

# Python venv ----------------------------------------------------------------------------------
requirements=$ROOT/requirements/$FLAVOUR.txt
stamp=$VENV/.pt2rt-requirements
if [ ! -x "$PYTHON" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! cmp -s "$requirements" "$stamp"; then
  log "pip install -r requirements/$FLAVOUR.txt"
  "$PYTHON" -m pip install -q --disable-pip-version-check -r "$requirements"
  "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT"
  cp "$requirements" "$stamp"
fi
# the example ops library's Python package (import my_ops)
if ! "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('my_ops') is None)"; then
  log "pip install -e ops/python (my_ops)"
  "$PYTHON" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT/ops/python"
fi

# Conan ----------------------------------------------------------------------------------------
conan=$VENV/bin/conan
[ -f "$CONAN_HOME/profiles/default" ] || "$conan" profile detect --exist-ok >/dev/null
# Only the repo's own recipes: ConanCenter is not reachable from every machine.
if "$conan" remote list 2>/dev/null | grep -q '^conancenter:.*Enabled: True'; then
  "$conan" remote disable conancenter >/dev/null
fi
"$conan" remote add "$CONAN_REMOTE" "$ROOT" --type=local-recipes-index --index 0 --force >/dev/null 2>&1 \
  || { echo "error: cannot register the local Conan recipes index $ROOT" >&2; exit 1; }
conan_stamp=$BUILD_DIR/.pt2rt-conan
conan_inputs=$( (echo "$CONAN_HOME"; cat "$ROOT/conanfile.py" $(find "$ROOT/recipes" -type f | sort)) | sha256sum | cut -d' ' -f1)
if [ ! -f "$BUILD_DIR/generators/conan_toolchain.cmake" ] || [ "$(cat "$conan_stamp" 2>/dev/null)" != "$conan_inputs" ]; then
  log "conan install (flavour $FLAVOUR)"
  mkdir -p "$ROOT/build"
  "$conan" install "$ROOT" -r "$CONAN_REMOTE" --build=missing --update \
    -o "&:flavour=$FLAVOUR" -o "&:with_tests=True" -s build_type="$BUILD_TYPE" -s compiler.cppstd=20 \
    -c tools.cmake.cmaketoolchain:generator=Ninja >"$ROOT/build/conan-$FLAVOUR.log" 2>&1 \
    || { tail -40 "$ROOT/build/conan-$FLAVOUR.log" >&2; echo "error: conan install failed; full log: build/conan-$FLAVOUR.log" >&2; exit 1; }
  echo "$conan_inputs" >"$conan_stamp"
  # CMake keeps what find_package found (Torch_DIR, ...) in its cache: configure afresh against the new packages
  rm -f "$BUILD_DIR/CMakeCache.txt"
fi
