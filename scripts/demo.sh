#!/usr/bin/env bash
# The main job end to end: build the ops library, then use the op and the class from Python.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh"
log "the ops library from Python"
(cd "$ROOT" && IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so "$PYTHON" -m export_tools demo-ops)
