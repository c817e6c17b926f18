#!/usr/bin/env bash
# make test-torch TORCH=2.11 (any of 2.11 .. 2.15, or a full version): the core tests against another torch than the
# flavour's. That torch's wheel goes into its own venv, cached per machine (~/.cache/pt2rt/torch-venvs/<version>;
# PyPI's wheels other than 2.13.0+cpu are CUDA 13 builds, ~5 GB with their NVIDIA libraries, which load without a
# GPU), and the project is built against it with plain CMake - the way a user without Conan builds against the torch
# they have - taking GTest, CLI11, nlohmann_json, libevent and gRPC from the regular build's Conan packages.
# Then: the C++ tests (the ops library's, and the runtime's on packages that torch exports), the ops library's
# Python tests and export_tools' compatibility tests under that torch, and AOTInductor's promise across versions
# (export_tools/compat.py): a package from the older of this torch and the flavour's runs under the newer's pt2run,
# and the newer's package is refused by the older's pt2run with exit 3, naming both versions.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$FLAVOUR" = cpu ] || { echo "error: make test-torch builds next to the cpu flavour (FLAVOUR=cpu)" >&2; exit 2; }

# The newest release of each supported minor (export_tools/compat.py: OLDEST .. NEWEST).
declare -A RELEASES=([2.11]=2.11.0 [2.12]=2.12.1 [2.13]=2.13.0 [2.14]=2.14.1 [2.15]=2.15.0)
TORCH=${TORCH:-}
if [ -n "${RELEASES[$TORCH]:-}" ]; then
  version=${RELEASES[$TORCH]}
elif [[ "$TORCH" =~ ^2\.(1[1-5])\.[0-9]+$ ]]; then
  version=$TORCH
else
  echo "error: TORCH must be a supported torch, 2.11 .. 2.15 (or a release such as 2.12.0); got '$TORCH'" >&2
  exit 2
fi
minor_of() { local v=${1#*.}; echo "${v%%.*}"; }

# The regular build first: its Conan packages, and its pt2run for the check across versions.
"$ROOT/scripts/build.sh"

venv=${PT2RT_TORCH_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/pt2rt/torch-venvs}/$version
requirements=$ROOT/requirements/torch-range.txt
want="torch==$version"$'\n'"$(cat "$requirements")"
if [ "$(cat "$venv/.pt2rt-requirements" 2>/dev/null)" != "$want" ]; then
  log "venv for torch $version: $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # a machine-wide pip constraint may cap torch below the range's newest release: this venv asks for one exactly
  PIP_CONSTRAINT=/dev/null "$venv/bin/pip" install -q --disable-pip-version-check "torch==$version" -r "$requirements"
  echo "$want" >"$venv/.pt2rt-requirements"
fi
vpython=$venv/bin/python
read -r prefix torch_full cuda <<<"$("$vpython" -c 'import torch; print(torch.utils.cmake_prefix_path, torch.__version__, torch.version.cuda or "none")')"
log "torch $torch_full (CUDA $cuda) from $venv"

build=$ROOT/build/torch-$version
cuda_env=()
if [ "$cuda" != none ]; then
  # a CUDA wheel's TorchConfig.cmake looks for the toolkit even when nothing is compiled for CUDA
  CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
  [ -x "$CUDA_ROOT/bin/nvcc" ] || { echo "error: torch $torch_full is a CUDA build: its CMake config needs the CUDA toolkit at $CUDA_ROOT (set CUDA_ROOT)" >&2; exit 1; }
  cuda_env=(PATH="$CUDA_ROOT/bin:$PATH" CUDA_PATH="$CUDA_ROOT" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}")
fi
if [ ! -f "$build/build.ninja" ]; then
  log "configure $build"
  env "${cuda_env[@]}" cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix;$BUILD_DIR/generators" -DCMAKE_FIND_PACKAGE_PREFER_CONFIG=ON \
    -DPT2RT_OPS_CUDA=OFF -DPT2RT_PYTHON="$vpython" -DPT2RT_MUTANT_TEXTS=OFF >"$build.configure.log" 2>&1 \
    || { tail -30 "$build.configure.log" >&2; echo "error: configure against torch $version failed (log: $build.configure.log)" >&2; exit 1; }
fi
log "build against torch $version"
env "${cuda_env[@]}" cmake --build "$build" >"$build.build.log" 2>&1 \
  || { grep -E "error|FAILED" -A3 "$build.build.log" | head -40 >&2; echo "error: build against torch $version failed (log: $build.build.log)" >&2; exit 1; }

status=0
results=()
step() {  # step NAME COMMAND...
  local name=$1 start=$SECONDS; shift
  log "$name"
  if "$@"; then results+=("PASSED  $name ($((SECONDS - start)) s)"); else results+=("FAILED  $name"); status=1; fi
}
step "ctest (the ops library's and the runtime's C++ tests; packages exported by torch $version)" \
  env "${cuda_env[@]}" PYTHONPATH="$ROOT:$ROOT/ops/python" ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)"
ops=$build/lib/libidentity_conv_ops.so
step "pytest under torch $version (ops/tests, test_compat.py, the export's packed weights and NaN)" \
  env -C "$ROOT" IDENTITY_CONV_OPS_LIBRARY="$ops" PT2RT_KERNELS_LIBRARY="$build/lib/libpt2rt_kernels.so" \
  PYTHONPATH="$ROOT:$ROOT/ops/python" \
  PT2RT_TEST_PACKAGES_DIR="$build/test-packages" \
  "$vpython" -m pytest -q -p no:cacheprovider -n "$(nproc)" ops/tests tests/python/test_compat.py \
  tests/python/test_export.py::test_optimize_folds_the_weights_by_default_keeping_nan_as_eager \
  tests/python/test_export.py::test_weights_are_packed_only_in_variants_for_the_build_machines_cpu_class

# Across versions: the same net exported by each torch (the C++ tests' packages), run by the other's pt2run.
here_minor=$(minor_of "$version")
main_version=$("$PYTHON" -c 'from export_tools import compat; print(compat.release())')
main_minor=$(minor_of "$main_version")
cross() {  # cross PACKAGE_BUILD RUNNER_BUILD EXPECTED_EXIT
  local out rc=0
  out=$("$2/bin/pt2run" verify "$1/test-packages/net_dynamic.pt2" --ops "$2/lib/libidentity_conv_ops.so" 2>&1) || rc=$?
  echo "$out" | tail -3
  [ "$rc" -eq "$3" ] || { echo "expected exit $3, got $rc" >&2; return 1; }
  [ "$3" -eq 0 ] || { echo "$out" | grep -q "exported with torch .* newer than this runtime's torch" \
                      || { echo "the refusal does not name both versions" >&2; return 1; }; }
}
[ "$here_minor" -eq "$main_minor" ] || ctest --test-dir "$BUILD_DIR" -R export_test_packages >/dev/null \
  || { echo "error: the regular build's test packages could not be exported" >&2; exit 1; }
if [ "$here_minor" -lt "$main_minor" ]; then
  step "torch $version's package runs under torch $main_version's pt2run" cross "$build" "$BUILD_DIR" 0
  step "torch $main_version's package is refused by torch $version's pt2run (exit 3)" cross "$BUILD_DIR" "$build" 3
elif [ "$here_minor" -gt "$main_minor" ]; then
  step "torch $main_version's package runs under torch $version's pt2run" cross "$BUILD_DIR" "$build" 0
  step "torch $version's package is refused by torch $main_version's pt2run (exit 3)" cross "$build" "$BUILD_DIR" 3
fi

echo "test-torch: torch $torch_full ($venv), built in $build:"
printf '  %s\n' "${results[@]}"
exit $status
