#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and a CUDA build of torch (2.11 or newer) but no Conan,
# no gtest and no package registry. Builds the ops library with plain CMake against that torch, runs the
# op and class tests on CUDA (against float64 CPU references and the CPU kernels), prints a summary.
#   scripts/gpu-check.sh            PYTHON=python3.12 scripts/gpu-check.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-$ROOT/build/gpu-check}
CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
export PATH=$CUDA_ROOT/bin:$PATH CUDA_PATH=$CUDA_ROOT
start=$(date +%s)

info=$("$PYTHON" - <<'PY'
import torch
assert torch.version.cuda, f"torch {torch.__version__} has no CUDA"
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
major, minor = torch.cuda.get_device_capability()
print(torch.utils.cmake_prefix_path, f"{major}.{minor}", torch.__version__, torch.cuda.get_device_name().replace(" ", "_"))
PY
) || { echo "gpu-check: no usable CUDA torch with $PYTHON" >&2; exit 2; }
read -r prefix arch torch_version gpu <<<"$info"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$arch}
echo "gpu-check: $gpu (sm $arch), torch $torch_version, nvcc $(nvcc --version | grep -o 'release [0-9.]*')"

generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DOPS_CUDA=ON -DPT2RT_BUILD_TESTS=OFF -DPT2RT_BUILD_RUNTIME=OFF >"$BUILD_DIR.configure.log" 2>&1 \
  || { tail -30 "$BUILD_DIR.configure.log"; echo "gpu-check: configure FAILED"; exit 1; }
cmake --build "$BUILD_DIR" -j "$(nproc)" >"$BUILD_DIR.build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$BUILD_DIR.build.log" | head -60; echo "gpu-check: build FAILED"; exit 1; }
lib=$BUILD_DIR/lib/libidentity_conv_ops.so
echo "gpu-check: built $lib in $(( $(date +%s) - start )) s"

cd "$ROOT"
IDENTITY_CONV_OPS_LIBRARY=$lib PYTHONPATH=$ROOT "$PYTHON" -m pytest -q -p no:cacheprovider -m cuda \
  tests/python 2>&1 | tail -25
rc=${PIPESTATUS[0]}
echo "gpu-check: CUDA tests $([ "$rc" -eq 0 ] && echo PASSED || echo FAILED) in $(( $(date +%s) - start )) s"
# The CUDA kernel benchmarks (op vs device-to-device copy, class vs cuDNN), ratios for docs/performance.md.
IDENTITY_CONV_OPS_LIBRARY=$lib PYTHONPATH=$ROOT "$PYTHON" benchmarks/kernels_torch.py --device cuda \
  --json "$BUILD_DIR.bench-cuda.json" || rc=1
echo "gpu-check: done in $(( $(date +%s) - start )) s total"
exit "$rc"
