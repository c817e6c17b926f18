#!/usr/bin/env bash
# The C API's consumers against the installed bundle: the C test (-std=c99 -pedantic -Werror), a clang + libc++
# program running the model from 4 threads, the C# binding under Mono and the Rust crate (Debian's cargo, offline). Each prints the checksum of 60 frames of
# the example model, compared here with the eager model's (Python).
#   consumers_test.sh BUILD_DIR SOURCE_DIR PACKAGES_DIR PYTHON
set -euo pipefail
build=$1 src=$2 packages=$3 python=$4
work=$build/c-api-test
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/bundle" >/dev/null
cmake --install "$build" --prefix "$work/bundle" --component bundle >/dev/null
b=$work/bundle
ops=$b/lib/libidentity_conv_ops.so
checksums=()
checksum_of() { sed -n 's/^checksum \([-0-9.e+]*\)$/\1/p' <<<"$1"; }

echo "== C99: cc -std=c99 -Wall -Wextra -Werror -pedantic"
cc -std=c99 -Wall -Wextra -Werror -pedantic -I"$b/include" "$src/tests/c_api/test_c_api.c" -o "$work/test_c_api" \
  -L"$b/lib" -lpt2rt -lm -Wl,-rpath,"$b/lib"
out=$(env -i "$work/test_c_api" "$packages" "$ops")
echo "$out"
checksums+=("C:$(checksum_of "$out")")

echo "== C99 built against version 1 of pt2rt_c.h (tests/c_api/v1), run against this library"
cc -std=c99 -Wall -Wextra -Werror -pedantic -I"$src/tests/c_api/v1" "$src/tests/c_api/test_c_api.c" \
  -o "$work/test_c_api_v1" -L"$b/lib" -lpt2rt -lm -Wl,-rpath,"$b/lib"
out=$(env -i "$work/test_c_api_v1" "$packages" "$ops")
echo "$out"
checksums+=("C, v1 header:$(checksum_of "$out")")

echo "== C99, versions 2 to 4: the package from memory (its file deleted), options, run_into from 4 threads"
cc -std=c99 -Wall -Wextra -Werror -pedantic -pthread -I"$b/include" "$src/tests/c_api/test_c_api_v2.c" \
  -o "$work/test_c_api_v2" -L"$b/lib" -lpt2rt -lm -Wl,-rpath,"$b/lib"
mkdir -p "$work/v2-tmp"
cp "$packages/net_dynamic.pt2" "$work/v2-model.pt2"
out=$(env -i TMPDIR="$work/v2-tmp" "$work/test_c_api_v2" "$work/v2-model.pt2" "$ops" default)
echo "$out"
[ ! -e "$work/v2-model.pt2" ] || { echo "test_c_api_v2 did not delete its package file" >&2; exit 1; }
checksums+=("C, version 2:$(checksum_of "$out")")

echo "== the same built against version 2 of pt2rt_c.h (tests/c_api/v2), run against this library"
cc -std=c99 -Wall -Wextra -Werror -pedantic -pthread -I"$src/tests/c_api/v2" "$src/tests/c_api/test_c_api_v2.c" \
  -o "$work/test_c_api_v2_header2" -L"$b/lib" -lpt2rt -lm -Wl,-rpath,"$b/lib"
cp "$packages/net_dynamic.pt2" "$work/v2-model.pt2"
out=$(env -i TMPDIR="$work/v2-tmp" "$work/test_c_api_v2_header2" "$work/v2-model.pt2" "$ops" default)
echo "$out"
grep -q "all C API version 2 checks passed" <<<"$out" || { echo "not built against version 2's header" >&2; exit 1; }
checksums+=("C, v2 header:$(checksum_of "$out")")

echo "== C++ with clang and libc++: clang++ -stdlib=libc++, the C header only, 4 threads"
clang++ -std=c++17 -stdlib=libc++ -Wall -Wextra -Werror -pthread -I"$b/include" \
  "$src/tests/c_api/libcxx_consumer.cpp" -o "$work/libcxx_consumer" -L"$b/lib" -lpt2rt -Wl,-rpath,"$b/lib"
needed=$(readelf -d "$work/libcxx_consumer" | grep NEEDED)
grep -q 'libc++.so' <<<"$needed" || { echo "libcxx_consumer does not use libc++: $needed" >&2; exit 1; }
if grep -q 'libstdc++' <<<"$needed"; then echo "libcxx_consumer links libstdc++ itself: $needed" >&2; exit 1; fi
out=$(env -i "$work/libcxx_consumer" "$packages" "$ops")
echo "$out"
checksums+=("libc++:$(checksum_of "$out")")

echo "== C# under Mono: bindings/csharp/Pt2rt.cs"
mcs -warnaserror -nologo -out:"$work/TestPt2rt.exe" "$src/bindings/csharp/Pt2rt.cs" "$src/tests/c_api/csharp/TestPt2rt.cs"
out=$(env -i HOME="$work" LD_LIBRARY_PATH="$b/lib" "$(command -v mono)" "$work/TestPt2rt.exe" "$packages" "$ops")
echo "$out"
checksums+=("C#:$(checksum_of "$out")")

echo "== Rust: bindings/rust (no dependencies), cargo test --offline"
out=$(PT2RT_LIB_DIR="$b/lib" PT2RT_TEST_PACKAGES="$packages" PT2RT_TEST_OPS="$ops" CARGO_TARGET_DIR="$work/rust" \
  RUSTFLAGS="-D warnings" CARGO_HOME="$work/cargo-home" /usr/bin/cargo test --offline \
  --manifest-path "$src/bindings/rust/Cargo.toml" -- --nocapture --test-threads 1 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E "^test |test result"
checksums+=("Rust:$(grep -o 'checksum -\?[0-9][0-9.e+-]*' <<<"$out" | cut -d' ' -f2)")

PYTHONPATH=$src IDENTITY_CONV_OPS_LIBRARY=$ops "$python" "$src/tests/cpp/eager_checksum.py" "${checksums[@]}"
rm -rf "$work"
