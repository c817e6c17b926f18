#!/usr/bin/env bash
# The main job end to end: build the ops library, use it from Python, export the example models to packages.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
export IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so
MODELS=$ROOT/build/models
mkdir -p "$MODELS"
cd "$ROOT"

log "the ops library from Python"
"$PYTHON" -m export_tools demo-ops

log "export identity_conv_net (dynamic batch 1..32) -> build/models/identity_conv_net.pt2"
"$PYTHON" -m export_tools export --model export_tools.models:identity_conv_net \
  --out "$MODELS/identity_conv_net.pt2" --dynamic-batch 1:32
log "export identity_conv_op_only (static) -> build/models/identity_conv_op_only.pt2"
"$PYTHON" -m export_tools export --model export_tools.models:identity_conv_op_only \
  --out "$MODELS/identity_conv_op_only.pt2"

log "what the package says about itself"
"$PYTHON" -m export_tools inspect "$MODELS/identity_conv_net.pt2"
log "its golden cases, run in Python"
"$PYTHON" -m export_tools -q verify "$MODELS/identity_conv_net.pt2"
