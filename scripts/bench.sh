#!/usr/bin/env bash
# make bench: builds (Release), exports the example packages when missing, runs benchmarks/bench.py, then
# benchmarks/serve_bench.py (pt2serve vs the KServe Python model server, in .venv-kserve; build/bench/serve),
# benchmarks/serve_threads.py (two models x two instances: every run on every core vs each model's share), then
# benchmarks/peers_bench.py (pt2run vs Python AOTInductor, eager, ONNX Runtime and OpenVINO, the peers in
# .venv-peers; build/bench/peers; PEERS_ARGS for its options), then benchmarks/lite_bench.py (pt2rt-lite against the
# full runtime; build/bench/lite; LITE_ARGS; `scripts/bench.sh lite` alone). Writes build/bench/report.json and
# build/bench/chart.png and prints the ratios. BENCH_ARGS=--quick for a smoke run. `scripts/bench.sh peers`
# (make bench-peers): the peers benchmark alone. Keep the machine otherwise idle:
# ratios are measured in one run, but noise still moves them.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
export IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so
# bench_venv NAME: .venv-NAME from requirements/NAME.txt (a peer's bench-only environment), remade when that changes
bench_venv() {
  local venv=$ROOT/.venv-$1 req=$ROOT/requirements/$1.txt
  if ! cmp -s "$req" "$venv/.pt2rt-requirements" 2>/dev/null; then
    log "pip install -r requirements/$1.txt -> .venv-$1"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/.pt2rt-requirements"
  fi
}
# peers: pt2run, Python AOTInductor and eager against ONNX Runtime and OpenVINO (build/bench/peers)
peers() {
  bench_venv peers
  log "peers benchmark -> build/bench/peers"
  cd "$ROOT"
  "$PYTHON" benchmarks/peers_bench.py --pt2run "$BUILD_DIR/bin/pt2run" --ops "$IDENTITY_CONV_OPS_LIBRARY" \
    --peers-python "$ROOT/.venv-peers/bin/python" --out "$ROOT/build/bench/peers" ${PEERS_ARGS:-}
}
# lite: pt2rt-lite against the full runtime on the same packages (build/bench/lite; LITE_ARGS for its options)
lite() {
  log "lite benchmark -> build/bench/lite"
  cd "$ROOT"
  "$PYTHON" benchmarks/lite_bench.py --pt2run "$BUILD_DIR/bin/pt2run" --pt2run-lite "$BUILD_DIR/bin/pt2run_lite" \
    --out "$ROOT/build/bench/lite" ${LITE_ARGS:-}
}
if [ "${1:-}" = peers ]; then
  peers
  exit
fi
if [ "${1:-}" = lite ]; then
  lite
  exit
fi
# export_if_missing PACKAGE FACTORY [EXPORT ARGS...]
export_if_missing() {
  local package=$1 factory=$2
  shift 2
  [ -f "$package" ] && return
  log "export $factory -> ${package#"$ROOT"/}"
  mkdir -p "$(dirname "$package")"
  "$PYTHON" -m export_tools -q export --model "my_ops.models:$factory" --out "$package" "$@"
}
PACKAGE=$ROOT/build/models/identity_conv_net.pt2
OP_PACKAGE=$ROOT/build/models/identity_conv_op_only.pt2
CONV_PACKAGE=$ROOT/build/models/conv_heavy_net.pt2
CLASSIFIER_PACKAGE=$ROOT/build/models/conv_classifier_net.pt2
export_if_missing "$PACKAGE" identity_conv_net --dynamic-batch 1:32
export_if_missing "$OP_PACKAGE" identity_conv_op_only
export_if_missing "$CONV_PACKAGE" conv_heavy_net --dynamic-batch 1:8
export_if_missing "$CLASSIFIER_PACKAGE" conv_classifier_net --dynamic-batch 1:16
# The serving benchmark's baseline: the KServe Python model server, in a venv of its own
bench_venv kserve
KSERVE_VENV=$ROOT/.venv-kserve
log "benchmarks -> build/bench"
cd "$ROOT"
"$PYTHON" benchmarks/bench.py --build "$BUILD_DIR" --package "$PACKAGE" --op-package "$OP_PACKAGE" --conv-package "$CONV_PACKAGE" --out "$ROOT/build/bench" ${BENCH_ARGS:-}
case " ${BENCH_ARGS:-} " in *" --only "*) exit 0 ;; esac
log "serving benchmark -> build/bench/serve"
"$PYTHON" benchmarks/serve_bench.py --pt2serve "$BUILD_DIR/bin/pt2serve" --ops "$IDENTITY_CONV_OPS_LIBRARY" \
  --package "$PACKAGE" --conv-package "$CONV_PACKAGE" --classifier-package "$CLASSIFIER_PACKAGE" \
  --kserve-python "$KSERVE_VENV/bin/python" \
  --out "$ROOT/build/bench/serve" $(case " ${BENCH_ARGS:-} " in *" --quick "*) echo "--seconds 1" ;; esac)
log "pt2serve's threads per model -> build/bench/serve_threads"
"$PYTHON" benchmarks/serve_threads.py --pt2serve "$BUILD_DIR/bin/pt2serve" --ops "$IDENTITY_CONV_OPS_LIBRARY" \
  --conv-package "$CONV_PACKAGE" --classifier-package "$CLASSIFIER_PACKAGE" --out "$ROOT/build/bench/serve_threads" \
  $(case " ${BENCH_ARGS:-} " in *" --quick "*) echo "--rounds 1 --seconds 1" ;; esac)
case " ${BENCH_ARGS:-} " in *" --quick "*) PEERS_ARGS="--rounds 1 --scale 0.2 ${PEERS_ARGS:-}"
  LITE_ARGS="--rounds 1 --scale 0.2 ${LITE_ARGS:-}" ;; esac
peers
lite
