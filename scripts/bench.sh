#!/usr/bin/env bash
# make bench: builds (Release), exports the example packages when missing, runs benchmarks/bench.py.
# Writes build/bench/report.json and build/bench/chart.png and prints the ratios. BENCH_ARGS=--quick for a
# smoke run. Keep the machine otherwise idle: ratios are measured in one run, but noise still moves them.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
export IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so
# export_if_missing PACKAGE FACTORY [EXPORT ARGS...]
export_if_missing() {
  local package=$1 factory=$2
  shift 2
  [ -f "$package" ] && return
  log "export $factory -> ${package#"$ROOT"/}"
  mkdir -p "$(dirname "$package")"
  "$PYTHON" -m export_tools -q export --model "export_tools.models:$factory" --out "$package" "$@"
}
PACKAGE=$ROOT/build/models/identity_conv_net.pt2
OP_PACKAGE=$ROOT/build/models/identity_conv_op_only.pt2
CONV_PACKAGE=$ROOT/build/models/conv_heavy_net.pt2
export_if_missing "$PACKAGE" identity_conv_net --dynamic-batch 1:32
export_if_missing "$OP_PACKAGE" identity_conv_op_only
export_if_missing "$CONV_PACKAGE" conv_heavy_net --dynamic-batch 1:8
log "benchmarks -> build/bench"
cd "$ROOT"
"$PYTHON" benchmarks/bench.py --build "$BUILD_DIR" --package "$PACKAGE" --op-package "$OP_PACKAGE" --conv-package "$CONV_PACKAGE" --out "$ROOT/build/bench" ${BENCH_ARGS:-}
