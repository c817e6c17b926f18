#!/usr/bin/env bash
# The C API's C tests against pt2rt-lite: test_c_api.c and test_c_api_v2.c (-std=c99 -pedantic -Werror) built
# against the build's libpt2rt_lite.so, run on the lite test packages (export_packages.py --lite: PACKAGES_DIR/lite)
# with libidentity_conv_ops_lite.so - no libtorch in the process - and their checksums of the example net compared
# with the eager model's (its TorchBind object's depthwise convolution is an aten one in the lite net).
#   lite_test.sh BUILD_DIR SOURCE_DIR PACKAGES_DIR PYTHON
set -euo pipefail
build=$1 src=$2 packages=$3/lite python=$4
work=$build/c-api-lite-test
rm -rf "$work"
mkdir -p "$work/tmp"
lib=$build/lib
ops=$lib/libidentity_conv_ops_lite.so
[ -f "$packages/net_dynamic.pt2" ] || { echo "no lite test packages in $packages (export_packages.py --lite)" >&2; exit 1; }
checksum_of() { sed -n 's/^checksum \([-0-9.e+]*\)$/\1/p' <<<"$1"; }
no_libtorch() {  # LD_DEBUG's list of the libraries a run initialised
  if grep -E 'calling init: .*/lib(torch|c10|python)[^/]*$' "$1"; then echo "libtorch or Python was loaded" >&2; exit 1; fi
  grep -q 'calling init: .*libidentity_conv_ops_lite.so' "$1" || { echo "the ops' lite build was not loaded" >&2; exit 1; }
}
checksums=()

echo "== C99 against libpt2rt_lite.so"
cc -std=c99 -Wall -Wextra -Werror -pedantic -I"$src/runtime/include" "$src/tests/c_api/test_c_api.c" \
  -o "$work/test_c_api" -L"$lib" -l:libpt2rt_lite.so -lm -Wl,-rpath,"$lib"
out=$(env -i LD_DEBUG=libs LD_DEBUG_OUTPUT="$work/ld" "$work/test_c_api" "$packages" "$ops")
echo "$out"
no_libtorch "$(ls "$work"/ld.* | head -1)"
rm -f "$work"/ld.*
checksums+=("C, lite:$(checksum_of "$out")")

echo "== C99, versions 2 to 4, against libpt2rt_lite.so: the package from memory, options, run_into from 4 threads"
cc -std=c99 -Wall -Wextra -Werror -pedantic -pthread -I"$src/runtime/include" "$src/tests/c_api/test_c_api_v2.c" \
  -o "$work/test_c_api_v2" -L"$lib" -l:libpt2rt_lite.so -lm -Wl,-rpath,"$lib"
cp "$packages/net_dynamic.pt2" "$work/model.pt2"
out=$(env -i TMPDIR="$work/tmp" "$work/test_c_api_v2" "$work/model.pt2" "$ops" default)
echo "$out"
[ ! -e "$work/model.pt2" ] || { echo "test_c_api_v2 did not delete its package file" >&2; exit 1; }
checksums+=("C version 2, lite:$(checksum_of "$out")")

PYTHONPATH=$src IDENTITY_CONV_OPS_LIBRARY=$lib/libidentity_conv_ops.so "$python" "$src/tests/cpp/eager_checksum.py" \
  "${checksums[@]}"
rm -rf "$work"
