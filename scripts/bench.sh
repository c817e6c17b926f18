#!/usr/bin/env bash
# make bench: builds (Release), exports the example packages when missing, runs benchmarks/bench.py.
# Writes build/bench/report.json and build/bench/chart.png and prints the ratios. BENCH_ARGS=--quick for a
# smoke run. Keep the machine otherwise idle: ratios are measured in one run, but noise still moves them.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
export IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so
PACKAGE=$ROOT/build/models/identity_conv_net.pt2
if [ ! -f "$PACKAGE" ]; then
  log "export identity_conv_net (dynamic batch 1..32) -> build/models/identity_conv_net.pt2"
  mkdir -p "$ROOT/build/models"
  "$PYTHON" -m export_tools -q export --model export_tools.models:identity_conv_net --out "$PACKAGE" \
    --dynamic-batch 1:32
fi
OP_PACKAGE=$ROOT/build/models/identity_conv_op_only.pt2
if [ ! -f "$OP_PACKAGE" ]; then
  log "export identity_conv_op_only (static) -> build/models/identity_conv_op_only.pt2"
  "$PYTHON" -m export_tools -q export --model export_tools.models:identity_conv_op_only --out "$OP_PACKAGE"
fi
log "benchmarks -> build/bench"
cd "$ROOT"
"$PYTHON" benchmarks/bench.py --build "$BUILD_DIR" --package "$PACKAGE" --op-package "$OP_PACKAGE" --out "$ROOT/build/bench" ${BENCH_ARGS:-}
