#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and a CUDA build of torch (2.11 or newer) but no Conan,
# no gtest and no package registry. Builds the ops library with plain CMake against that torch, runs the
# op and class tests on CUDA (against float64 CPU references and the CPU kernels), then the whole path on the GPU:
# exports a device="cuda" package, verifies it in Python, and runs it with pt2run (C++, no Python) - verify, run
# compared with the eager model, bench. The runtime needs build/gpu-deps (scripts/gpu-deps.sh on the Conan machine,
# carried along); without it that part is skipped and says so. Prints a summary; exit 1 when anything failed.
#   scripts/gpu-check.sh            PYTHON=python3.12 scripts/gpu-check.sh      BENCH=0 scripts/gpu-check.sh (no benchmarks)
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

DEPS=${PT2RT_DEPS_DIR:-$ROOT/build/gpu-deps}
runtime=OFF; [ -d "$DEPS/include/nlohmann" ] && runtime=ON
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DPT2RT_OPS_CUDA=ON -DPT2RT_BUILD_TESTS=OFF -DPT2RT_BUILD_RUNTIME=$runtime -DPT2RT_DEPS_DIR="$DEPS" \
  >"$BUILD_DIR.configure.log" 2>&1 \
  || { tail -30 "$BUILD_DIR.configure.log"; echo "gpu-check: configure FAILED"; exit 1; }
cmake --build "$BUILD_DIR" -j "$(nproc)" >"$BUILD_DIR.build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$BUILD_DIR.build.log" | head -60; echo "gpu-check: build FAILED"; exit 1; }
lib=$BUILD_DIR/lib/libidentity_conv_ops.so
echo "gpu-check: built $lib in $(( $(date +%s) - start )) s with $(command -v "${CXX:-c++}")"
# which C++ runtime and unwinder the library gets next to torch's (a mismatch crashes on the first thrown error)
ldd "$lib" | grep -E 'libstdc\+\+|libgcc_s|libgomp' | sed 's/^\s*/gpu-check: ldd: /'

cd "$ROOT"
# The op and class tests (ops/tests): the CUDA ones, then the CPU ones on this machine's CPU (another host class).
grep -m1 'model name' /proc/cpuinfo; echo "cpu flags: $(grep -o -w 'avx2\|avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
rc=0
for marker in cuda "not cuda"; do
  log=$BUILD_DIR.pytest-${marker// /-}.log
  IDENTITY_CONV_OPS_LIBRARY=$lib PYTHONPATH=$ROOT:$ROOT/ops/python "$PYTHON" -m pytest -q -p no:cacheprovider \
    -m "$marker" ops/tests >"$log" 2>&1
  r=$?; [ "$r" -eq 0 ] || rc=1
  # a crash: where (faulthandler's first frames), else the summary
  if grep -q "^Fatal Python error" "$log"; then grep -A12 "^Fatal Python error" "$log"; else tail -8 "$log"; fi
  echo "gpu-check: ops tests -m '$marker' $([ "$r" -eq 0 ] && echo PASSED || echo FAILED) in $(( $(date +%s) - start )) s"
done

# The whole path on the GPU: a device="cuda" package, verified in Python, then run by pt2run.
step() {  # step NAME COMMAND...: runs it, prints its last lines and PASSED/FAILED
  local name=$1; shift
  if out=$("$@" 2>&1); then echo "$out" | tail -6; echo "gpu-check: $name PASSED"
  else echo "$out" | tail -15; echo "gpu-check: $name FAILED"; rc=1; fi
}
export IDENTITY_CONV_OPS_LIBRARY=$lib PYTHONPATH=$ROOT:$ROOT/ops/python
pkg=$BUILD_DIR.net_cuda.pt2
step "export --device cuda" "$PYTHON" -m export_tools -q export --model my_ops.models:identity_conv_net \
  --out "$pkg" --device cuda --dynamic-batch 1:32
step "export-tools verify (Python, GPU)" "$PYTHON" -m export_tools -q verify "$pkg"
if [ "$runtime" = ON ] && [ -x "$BUILD_DIR/bin/pt2run" ]; then
  pt2run=$BUILD_DIR/bin/pt2run
  step "pt2run info" "$pt2run" info "$pkg"
  step "pt2run verify (C++, GPU)" "$pt2run" verify "$pkg" --ops "$lib"
  "$PYTHON" - "$BUILD_DIR" <<'PY' || { echo "gpu-check: writing the input FAILED"; rc=1; }
import sys, torch
from my_ops import models
model, _ = models.identity_conv_net()
x = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(0))
torch.save(x, sys.argv[1] + ".x.pt")
with torch.no_grad():
    torch.save(model.cuda()(x.cuda()).cpu(), sys.argv[1] + ".eager.pt")
PY
  step "pt2run run" "$pt2run" run "$pkg" --ops "$lib" --input "$BUILD_DIR.x.pt" --output "$BUILD_DIR.out.pt"
  step "pt2run output equals eager on the GPU" "$PYTHON" -c "
import sys, torch
out, eager = torch.load(sys.argv[1]), torch.load(sys.argv[2])
torch.testing.assert_close(out, eager, rtol=1.3e-6, atol=1e-5)
print('max abs error', (out - eager).abs().max().item())" "$BUILD_DIR.out.pt" "$BUILD_DIR.eager.pt"
  step "pt2run bench" "$pt2run" bench "$pkg" --ops "$lib" --iters 200
else
  echo "gpu-check: pt2run on the GPU SKIPPED: no $DEPS/include/nlohmann (run scripts/gpu-deps.sh on the Conan machine and carry build/gpu-deps)"
  rc=1
fi
# The CUDA kernel benchmarks (op vs device-to-device copy, class vs cuDNN), ratios for docs/performance.md.
[ "${BENCH:-1}" = 0 ] && { echo "gpu-check: done in $(( $(date +%s) - start )) s total (BENCH=0: no benchmarks)"; exit "$rc"; }
"$PYTHON" benchmarks/kernels_torch.py --device cuda --json "$BUILD_DIR.bench-cuda.json" || rc=1
"$PYTHON" benchmarks/kernels_torch.py --device cpu --min-run-time 0.2 --json "$BUILD_DIR.bench-cpu.json" || rc=1
echo "gpu-check: done in $(( $(date +%s) - start )) s total"
exit "$rc"
