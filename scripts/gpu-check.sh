#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and a CUDA build of torch (2.11 .. 2.15) but no Conan, no gtest and no
# package index - run in one go (such a machine is lent for minutes). Builds the ops library with plain CMake against
# that torch, runs the op and class tests on CUDA (against float64 CPU references and the CPU kernels), then the
# whole path on the GPU: exports a device="cuda" package, verifies it in Python, runs it with pt2run (C++, no Python)
# - verify, run compared with the eager model, bench - serves it with pt2serve and checks answers over HTTP and gRPC
# against the eager model on the GPU, then the kernel benchmarks. Ends with one summary table; exit 1 when anything
# failed.
# What it needs from the machine with Conan (scripts/gpu-deps.sh fills build/gpu-deps; carry that folder along):
# headers for libpt2rt and pt2run, and pt2serve built against that machine's torch release with the libraries it
# needs (without them those steps say SKIPPED and fail the run).
#   scripts/gpu-check.sh            PYTHON=python3.12 scripts/gpu-check.sh      BENCH=0 scripts/gpu-check.sh (no benchmarks)
#   DRY_RUN=1 PYTHON=~/.cache/pt2rt/torch-venvs/2.11.0/bin/python scripts/gpu-check.sh
#     the rehearsal on a machine without a GPU: every step on the CPU (package, pt2run, pt2serve), the CUDA kernels
#     compiled but not run, so the GPU machine's minutes go to the GPU.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-$ROOT/build/gpu-check}
CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
DRY_RUN=${DRY_RUN:-0}
export PATH=$CUDA_ROOT/bin:$PATH CUDA_PATH=$CUDA_ROOT
start=$(date +%s)
device=cuda
[ "$DRY_RUN" = 1 ] && device=cpu

info=$(DRY_RUN=$DRY_RUN "$PYTHON" - <<'PY'
import os, torch
assert torch.version.cuda, f"torch {torch.__version__} has no CUDA"
if os.environ["DRY_RUN"] == "1":
    arch, gpu = "9.0", "none_(dry_run)"
else:
    assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
    major, minor = torch.cuda.get_device_capability()
    arch, gpu = f"{major}.{minor}", torch.cuda.get_device_name().replace(" ", "_")
print(torch.utils.cmake_prefix_path, arch, torch.__version__, gpu, os.path.dirname(torch.__file__) + "/lib")
PY
) || { echo "gpu-check: no usable CUDA torch with $PYTHON" >&2; exit 2; }
read -r prefix arch torch_version gpu torch_lib <<<"$info"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$arch}
echo "gpu-check: $gpu (sm $arch), torch $torch_version, nvcc $(nvcc --version | grep -o 'release [0-9.]*'), device $device"

results=()
rc=0
record() {  # record PASSED|FAILED|SKIPPED WHAT [DETAIL]
  results+=("$(printf '%-8s %s%s' "$1" "$2" "${3:+  ($3)}")")
  [ "$1" = PASSED ] || rc=1
}
summary() {
  echo
  echo "gpu-check summary: $gpu (sm $arch), torch $torch_version, device $device, $(( $(date +%s) - start )) s"
  printf '  %s\n' "${results[@]}"
  exit "$rc"
}

DEPS=${PT2RT_DEPS_DIR:-$ROOT/build/gpu-deps}
runtime=OFF; [ -d "$DEPS/include/nlohmann" ] && runtime=ON
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DPT2RT_OPS_CUDA=ON -DPT2RT_BUILD_TESTS=OFF -DPT2RT_BUILD_RUNTIME=$runtime -DPT2RT_DEPS_DIR="$DEPS" \
  >"$BUILD_DIR.configure.log" 2>&1 \
  || { tail -30 "$BUILD_DIR.configure.log"; record FAILED "configure (log: $BUILD_DIR.configure.log)"; summary; }
cmake --build "$BUILD_DIR" -j "$(nproc)" >"$BUILD_DIR.build.log" 2>&1 \
  || { grep -E "error|Error" -A3 "$BUILD_DIR.build.log" | head -60; record FAILED "build (log: $BUILD_DIR.build.log)"; summary; }
lib=$BUILD_DIR/lib/libidentity_conv_ops.so
record PASSED "build: ops library with CUDA kernels$([ "$runtime" = ON ] && echo ', libpt2rt, pt2run')" \
  "$(( $(date +%s) - start )) s, $(command -v "${CXX:-c++}")"
# which C++ runtime and unwinder the library gets next to torch's (a mismatch crashes on the first thrown error)
ldd "$lib" | grep -E 'libstdc\+\+|libgcc_s|libgomp' | sed 's/^\s*/gpu-check: ldd: /'

cd "$ROOT"
# The op and class tests (ops/tests): the CUDA ones, then the CPU ones on this machine's CPU (another host class).
grep -m1 'model name' /proc/cpuinfo; echo "cpu flags: $(grep -o -w 'avx2\|avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
markers=(cuda "not cuda")
[ "$DRY_RUN" = 1 ] && markers=("not cuda")
for marker in "${markers[@]}"; do
  log=$BUILD_DIR.pytest-${marker// /-}.log
  IDENTITY_CONV_OPS_LIBRARY=$lib PYTHONPATH=$ROOT:$ROOT/ops/python "$PYTHON" -m pytest -q -p no:cacheprovider \
    -m "$marker" ops/tests >"$log" 2>&1
  r=$?
  # a crash: where (faulthandler's first frames), else the summary
  if grep -q "^Fatal Python error" "$log"; then grep -A12 "^Fatal Python error" "$log"; else tail -3 "$log"; fi
  record "$([ "$r" -eq 0 ] && echo PASSED || echo FAILED)" "ops tests -m '$marker'" "$(tail -1 "$log" | tr -d '=')"
done

# The whole path on the device: a package, verified in Python, run by pt2run, served by pt2serve.
step() {  # step NAME COMMAND...: runs it, prints its last lines, records PASSED/FAILED
  local name=$1 out; shift
  if out=$("$@" 2>&1); then echo "$out" | tail -4; record PASSED "$name" "$(echo "$out" | tail -1 | cut -c1-120)"
  else echo "$out" | tail -15; record FAILED "$name"; fi
}
export IDENTITY_CONV_OPS_LIBRARY=$lib PYTHONPATH=$ROOT:$ROOT/ops/python
pkg=$BUILD_DIR.net_$device.pt2
step "export --device $device" "$PYTHON" -m export_tools -q export --model my_ops.models:identity_conv_net \
  --out "$pkg" --device "$device" --dynamic-batch 1:32
step "export-tools verify (Python, $device)" "$PYTHON" -m export_tools -q verify "$pkg" --ops-library "$lib"
if [ "$runtime" = ON ] && [ -x "$BUILD_DIR/bin/pt2run" ]; then
  pt2run=$BUILD_DIR/bin/pt2run
  step "pt2run info" "$pt2run" info "$pkg"
  step "pt2run verify (C++, $device)" "$pt2run" verify "$pkg" --ops "$lib"
  DEVICE=$device "$PYTHON" - "$BUILD_DIR" <<'PY' || record FAILED "writing the input and eager's output"
import os, sys, torch
from my_ops import models
model, _ = models.identity_conv_net()
x = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(0))
torch.save(x, sys.argv[1] + ".x.pt")
with torch.no_grad():
    torch.save(model.to(os.environ["DEVICE"])(x.to(os.environ["DEVICE"])).cpu(), sys.argv[1] + ".eager.pt")
PY
  step "pt2run run" "$pt2run" run "$pkg" --ops "$lib" --input "$BUILD_DIR.x.pt" --output "$BUILD_DIR.out.pt"
  step "pt2run output equals eager on $device" "$PYTHON" -c "
import sys, torch
out, eager = torch.load(sys.argv[1]), torch.load(sys.argv[2])
torch.testing.assert_close(out, eager, rtol=1.3e-6, atol=1e-5)
print('max abs error', (out - eager).abs().max().item())" "$BUILD_DIR.out.pt" "$BUILD_DIR.eager.pt"
  step "pt2run bench" "$pt2run" bench "$pkg" --ops "$lib" --iters 200
else
  echo "gpu-check: pt2run SKIPPED: no $DEPS/include/nlohmann (run scripts/gpu-deps.sh on the Conan machine and carry build/gpu-deps)"
  record SKIPPED "pt2run (no build/gpu-deps)"
fi

# pt2serve, built on the Conan machine against this torch release (gpu-deps.sh): HTTP and gRPC vs eager.
serve=$DEPS/serve
here=${torch_version%%+*}
if [ ! -x "$serve/bin/pt2serve" ]; then
  record SKIPPED "pt2serve (no $serve/bin/pt2serve: scripts/gpu-deps.sh on the Conan machine)"
elif [ "$(cat "$serve/torch-version")" != "$here" ]; then
  record SKIPPED "pt2serve (built against torch $(cat "$serve/torch-version"), this machine has $here: SERVE_TORCH=$here scripts/gpu-deps.sh)"
else
  py=$BUILD_DIR.py
  [ -d "$py/grpc" ] || "$PYTHON" -m pip install -q --no-index --no-deps --find-links "$serve/wheels" --target "$py" \
    grpcio protobuf >"$BUILD_DIR.pip.log" 2>&1 \
    || { tail -5 "$BUILD_DIR.pip.log"; record FAILED "installing grpcio and protobuf from $serve/wheels"; }
  cp "$serve"/py/*.py "$py/" 2>/dev/null
  step "pt2serve on $device: HTTP and gRPC answers equal eager" env LD_LIBRARY_PATH="$serve/lib:$torch_lib" \
    "$PYTHON" "$ROOT/scripts/gpu_serve_check.py" --pt2serve "$serve/bin/pt2serve" --package "$pkg" --ops "$lib" \
    --device "$device" --py "$py"
fi

# The CUDA kernel benchmarks (op vs device-to-device copy, class vs cuDNN), ratios for docs/performance.md.
if [ "${BENCH:-1}" = 0 ]; then
  record SKIPPED "kernel benchmarks (BENCH=0)"
else
  for bench_device in $([ "$DRY_RUN" = 1 ] && echo cpu || echo cuda cpu); do
    min=$([ "$bench_device" = cpu ] && echo 0.2 || echo 0.3)
    if "$PYTHON" benchmarks/kernels_torch.py --device "$bench_device" --min-run-time "$min" \
         --json "$BUILD_DIR.bench-$bench_device.json"; then
      record PASSED "kernel benchmarks ($bench_device)" "$BUILD_DIR.bench-$bench_device.json"
    else
      record FAILED "kernel benchmarks ($bench_device)"
    fi
  done
fi
summary
