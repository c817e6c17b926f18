#!/usr/bin/env bash
# Fills build/gpu-deps with what the runtime needs besides torch, for a machine without Conan (the GPU check):
# the nlohmann_json and CLI11 headers of the regular build's Conan packages, OpenSSL's headers and libcrypto.so.3
# (used there only when that machine has no OpenSSL of its own). Carry build/gpu-deps to that machine; gpu-check.sh
# then builds libpt2rt and pt2run with -DPT2RT_DEPS_DIR=build/gpu-deps. Needs a regular build (make build) first.
# TRIPLET=aarch64-linux-gnu: the same for a cross build without Conan (build/deps-linux-aarch64; OpenSSL from Debian's
# libssl-dev:arm64, which scripts/cross-build.sh installs).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TRIPLET=${TRIPLET:-x86_64-linux-gnu}
if [ "$TRIPLET" = x86_64-linux-gnu ]; then DEST=$ROOT/build/gpu-deps; else DEST=$ROOT/build/deps-linux-${TRIPLET%%-*}; fi
GEN=$ROOT/build/cpu-release/generators
folder() {  # the Conan package folder a generated <name>-release-x86_64-data.cmake names (absolute, or relative to it)
  local data=$GEN/$1-release-x86_64-data.cmake path
  [ -f "$data" ] || { echo "error: $data not found: run make build first" >&2; exit 1; }
  path=$(sed -n "s/^set($2_PACKAGE_FOLDER_RELEASE \"\(.*\)\")/\1/p" "$data")
  path=${path//'${CMAKE_CURRENT_LIST_DIR}'/$GEN}
  [ -d "$path" ] || { echo "error: no Conan package folder for $1 (from $data: '$path')" >&2; exit 1; }
  echo "$path"
}
rm -rf "$DEST"
mkdir -p "$DEST/include" "$DEST/lib"
cp -r "$(folder nlohmann_json nlohmann_json)/include/nlohmann" "$DEST/include/"
cp -r "$(folder CLI11 cli11)/include/CLI" "$DEST/include/"
[ -d /usr/include/openssl ] || { echo "error: OpenSSL headers not found (apt-get install libssl-dev)" >&2; exit 1; }
cp -r /usr/include/openssl "$DEST/include/"
cp /usr/include/$TRIPLET/openssl/*.h "$DEST/include/openssl/" 2>/dev/null || true
[ -f /usr/lib/$TRIPLET/libcrypto.so.3 ] || { echo "error: no /usr/lib/$TRIPLET/libcrypto.so.3 (libssl-dev of that arch)" >&2; exit 1; }
cp -L /usr/lib/$TRIPLET/libcrypto.so.3 "$DEST/lib/"

# pt2serve for the GPU machine (x86-64 only): that machine cannot build it (no libevent, gRPC, protobuf there), so
# it is built here against the same torch release as that machine's (make test-torch TORCH=<it>; SERVE_TORCH, default
# 2.11.0 - what the lent machine has) and carried with the libraries it needs besides torch and the C runtime;
# gpu-check.sh runs it only when the machine's torch is that release. With it: the gRPC client's pieces for
# Python 3.12, and 3.11 for the rehearsal here (grpcio, protobuf: the versions of this venv's, whose tritonclient has
# the protocol's modules).
if [ "$TRIPLET" = x86_64-linux-gnu ]; then
  SERVE_TORCH=${SERVE_TORCH:-2.11.0}
  serve_build=$ROOT/build/torch-$SERVE_TORCH
  [ -x "$serve_build/bin/pt2serve" ] || { echo "error: no $serve_build/bin/pt2serve: run make test-torch TORCH=$SERVE_TORCH first" >&2; exit 1; }
  mkdir -p "$DEST/serve/bin" "$DEST/serve/lib" "$DEST/serve/py"
  cp "$serve_build/bin/pt2serve" "$DEST/serve/bin/"
  cp -P "$serve_build"/lib/libpt2rt.so* "$DEST/serve/lib/"
  echo "$SERVE_TORCH" >"$DEST/serve/torch-version"
  # what ldd resolves outside torch's wheel and the C runtime (every GPU machine has those)
  ldd "$serve_build/bin/pt2serve" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpt2rt.so*) ;;
      *) case "$path" in */site-packages/*|*/torch/lib/*) ;; *) cp -L "$path" "$DEST/serve/lib/$name" ;; esac ;;
    esac
  done
  site=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  cp "$site"/tritonclient/grpc/service_pb2.py "$site"/tritonclient/grpc/service_pb2_grpc.py \
     "$site"/tritonclient/grpc/model_config_pb2.py "$DEST/serve/py/"
  versions=$("$PYTHON" -c 'from importlib.metadata import version as v; print(" ".join(p + "==" + v(p) for p in ("grpcio", "protobuf")))')
  for py in 3.11 3.12; do
    PIP_CONSTRAINT=/dev/null "$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      --python-version $py --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux_2_28_x86_64 -d "$DEST/serve/wheels" $versions  # two words on purpose
  done
fi
log "$(du -sh "$DEST" | cut -f1) in $DEST"
