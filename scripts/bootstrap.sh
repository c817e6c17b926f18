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
              libsleef-dev  # the vector math that lite model libraries link (export --lite)
              libjemalloc-dev  # pt2run's and pt2serve's malloc (runtime/cli/allocator.cpp)
              ccache)  # compiler cache shared by every build tree and clone (scripts/lib.sh)
ensure_debian_packages "${APT_PACKAGES[@]}"
if [ "$FLAVOUR" = cuda ] && [ ! -x "$CUDA_ROOT/bin/nvcc" ]; then
  echo "error: the cuda flavour needs nvcc at $CUDA_ROOT/bin/nvcc (set CUDA_ROOT to the CUDA 13 toolkit)" >&2
  exit 1
fi

# Python venv ----------------------------------------------------------------------------------
# uv installs the wheels ~10x faster than pip (torch's CUDA wheel and its libraries: 18 s against 94 s), from its
# per-machine cache; pip does it where uv cannot be had (PT2RT_UV=0 chooses pip). uv reads no pip.conf: the index
# settings pip has (find-links, index URLs, constraints, cert) are passed on, and like pip it takes the best
# version from every index.
UV_VERSION=0.13.9
uv_settings() {
  "$PYTHON" -m pip config list 2>/dev/null | "$PYTHON" -c '
import shlex, sys
found = {}
for line in sys.stdin:
    key, _, value = line.strip().partition("=")
    scope, _, name = key.rpartition(".")
    if scope == ":env:" or name not in found:
        found[name] = value.strip("\x27\"")
flags = {"find-links": "--find-links", "index-url": "--index-url", "extra-index-url": "--extra-index-url",
         "constraint": "--constraint"}
args = ["--index-strategy", "unsafe-best-match"]
for name, flag in flags.items():
    for value in found.get(name, "").split():
        args += [flag, value]
cert = shlex.quote(found.get("cert", ""))
print(f"uv_args=({shlex.join(args)}); uv_cert={cert}")'
}
venv_install() {
  if [ "${PT2RT_UV:-1}" != 0 ] && { [ -x "$VENV/bin/uv" ] && [ "$("$VENV/bin/uv" --version | cut -d' ' -f2)" = "$UV_VERSION" ] \
       || "$PYTHON" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" >/dev/null 2>&1; }; then
    local uv_args uv_cert settings
    settings=$(uv_settings) && eval "$settings" && SSL_CERT_FILE=${SSL_CERT_FILE:-$uv_cert} "$VENV/bin/uv" pip install -q --python "$PYTHON" "${uv_args[@]}" "$@" && return 0
    log "uv failed; pip install $*"
  fi
  "$PYTHON" -m pip install -q --disable-pip-version-check "$@"
}
requirements=$ROOT/requirements/$FLAVOUR.txt
stamp=$VENV/.pt2rt-requirements
if [ ! -x "$PYTHON" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
if ! cmp -s "$requirements" "$stamp"; then
  log "install -r requirements/$FLAVOUR.txt"
  venv_install -r "$requirements"
  venv_install --no-deps --no-build-isolation -e "$ROOT"
  cp "$requirements" "$stamp"
fi
# the example ops library's Python package (import my_ops)
if ! "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('my_ops') is None)"; then
  log "install -e ops/python (my_ops)"
  venv_install --no-deps --no-build-isolation -e "$ROOT/ops/python"
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
conan_inputs=$( (echo "$CONAN_HOME"; cat "$ROOT/conanfile.py" $(find "$ROOT/recipes" "$ROOT/export_tools/cmake" -type f | sort)) | sha256sum | cut -d' ' -f1)
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
