#!/usr/bin/env bash
# The main job end to end: build, use the ops from Python, export the example model, install the relocatable
# bundle into dist/ and run the package there with pt2run - no Python.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
export IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so
MODELS=$ROOT/build/models
mkdir -p "$MODELS"
cd "$ROOT"

log "the ops library from Python"
"$PYTHON" -m my_ops

# Portable packages: dist/ is meant to be copied to other machines, so each package holds an x86-64 baseline
# variant (runs anywhere), AVX2 and AVX-512 ones; pt2run loads the best this CPU runs. (export's own default is
# native: fastest on this machine, but only for CPUs with all of this one's features.)
CPU_ISA=default,avx2,avx512
log "export identity_conv_net (dynamic batch 1..32, CPU variants $CPU_ISA) -> build/models/identity_conv_net.pt2"
"$PYTHON" -m export_tools export --model my_ops.models:identity_conv_net \
  --out "$MODELS/identity_conv_net.pt2" --dynamic-batch 1:32 --cpu-isa "$CPU_ISA"

log "what the package says about itself"
"$PYTHON" -m export_tools inspect "$MODELS/identity_conv_net.pt2"
log "its golden cases, run in Python"
"$PYTHON" -m export_tools -q verify "$MODELS/identity_conv_net.pt2" --ops-library "$BUILD_DIR/lib/libidentity_conv_ops.so"

DIST=$ROOT/dist
log "install the bundle -> dist/ (pt2run, libpt2rt, the ops library, the libtorch it needs, the model)"
rm -rf "$DIST"
cmake --install "$BUILD_DIR" --prefix "$DIST" >/dev/null
cmake --install "$BUILD_DIR" --prefix "$DIST" --component bundle >/dev/null
mkdir -p "$DIST/models"
cp "$MODELS/identity_conv_net.pt2" "$DIST/models/"
"$PYTHON" - "$DIST/models/frame.pt" <<'PY'
import sys, torch
torch.save(torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1)), sys.argv[1])
PY

unset IDENTITY_CONV_OPS_LIBRARY
run_env=(env -i)
if [ "$FLAVOUR" = cuda ]; then
  # torch's CUDA libraries find the NVIDIA libraries of the wheel through RPATH; the bundle does not carry them.
  nvidia=$(ls -d "$VENV"/lib/python3*/site-packages/nvidia/*/lib | paste -sd:)
  run_env=(env -i "LD_LIBRARY_PATH=$nvidia")
fi
log "env -i dist/bin/pt2run info dist/models/identity_conv_net.pt2"
"${run_env[@]}" "$DIST/bin/pt2run" info "$DIST/models/identity_conv_net.pt2"
log "env -i dist/bin/pt2run verify dist/models/identity_conv_net.pt2"
"${run_env[@]}" "$DIST/bin/pt2run" verify "$DIST/models/identity_conv_net.pt2"
log "env -i PT2RT_CPU_ISA=default dist/bin/pt2run verify dist/models/identity_conv_net.pt2 (the portable variant)"
"${run_env[@]}" PT2RT_CPU_ISA=default "$DIST/bin/pt2run" verify "$DIST/models/identity_conv_net.pt2"
log "env -i dist/bin/pt2run run dist/models/identity_conv_net.pt2 --input frame.pt --output out.pt"
"${run_env[@]}" "$DIST/bin/pt2run" run "$DIST/models/identity_conv_net.pt2" --input "$DIST/models/frame.pt" \
  --output "$DIST/models/out.pt"
"$PYTHON" - "$DIST/models/frame.pt" "$DIST/models/out.pt" <<'PY'
import sys, torch
from my_ops import models
model, _ = models.identity_conv_net()
x, y = torch.load(sys.argv[1]), torch.load(sys.argv[2])
with torch.no_grad():
    torch.testing.assert_close(y, model(x))
print(f"pt2run's output for a {list(x.shape)} frame equals the eager PyTorch model's: {list(y.shape)}")
PY
log "dist/bin/pt2serve on a model repository; one request with tritonclient (Open Inference Protocol), then SIGTERM"
REPO=$ROOT/build/demo-repository
rm -rf "$REPO" && mkdir -p "$REPO/identity_conv_net/1"
cp "$DIST/models/identity_conv_net.pt2" "$REPO/identity_conv_net/1/model.pt2"
echo '{"dynamic_batching": {"max_queue_delay_microseconds": 500}}' >"$REPO/identity_conv_net/config.json"
SERVE_LOG=$ROOT/build/demo-pt2serve.log
"${run_env[@]}" "$DIST/bin/pt2serve" --model-repository "$REPO" --http-port 0 --grpc-port 0 2>"$SERVE_LOG" &
serve_pid=$!
"$PYTHON" "$ROOT/scripts/oip_check.py" "$DIST/models/frame.pt" --log "$SERVE_LOG"
kill -TERM "$serve_pid"
wait "$serve_pid" || { echo "error: pt2serve exited $? after SIGTERM" >&2; exit 1; }
tail -2 "$SERVE_LOG"

log "summary"
echo "dist/ holds $(du -sh "$DIST" | cut -f1): bin/pt2run, bin/pt2serve, lib/ (libpt2rt, libpt2rt_kernels, libidentity_conv_ops, libtorch), include/pt2rt,"
echo "lib/cmake/pt2rt, models/identity_conv_net.pt2 - move it anywhere; no Python needed there."
