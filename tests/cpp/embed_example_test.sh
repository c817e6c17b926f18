#!/usr/bin/env bash
# Installs the bundle, builds examples/embed against it with find_package(pt2rt) alone, runs it and compares the
# checksum it prints with the eager model's (Python), then moves the bundle and runs pt2run from it with an empty
# environment.
#   embed_example_test.sh BUILD_DIR SOURCE_DIR PACKAGE PYTHON
set -euo pipefail
build=$1 src=$2 package=$3 python=$4
work=$build/embed-test
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/bundle" >/dev/null
cmake --install "$build" --prefix "$work/bundle" --component bundle >/dev/null
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src/examples/embed" -B "$work/example" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/bundle" >/dev/null
cmake --build "$work/example" >/dev/null
out=$(env -i "$work/example/embed_example" "$package" 60 3)
echo "$out"
checksum=$(echo "$out" | sed -n 's/.*, 0 failures, checksum \([-0-9.e+]*\)$/\1/p')
[ -n "$checksum" ] || { echo "no checksum with 0 failures in the example's output" >&2; exit 1; }
PYTHONPATH=$src IDENTITY_CONV_OPS_LIBRARY=$build/lib/libidentity_conv_ops.so "$python" "$src/tests/cpp/eager_checksum.py" \
  "embed_example:$checksum"
mkdir -p "$work/bundle/models"
cp "$package" "$work/bundle/models/"
mv "$work/bundle" "$work/moved"
env -i "$work/moved/bin/pt2run" verify "$work/moved/models/$(basename "$package")"
rm -rf "$work"
