#!/usr/bin/env bash
# Configures and builds the flavour's CMake preset (after bootstrap).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/bootstrap.sh"
use_ccache
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  log "cmake --preset $PRESET"
  (cd "$ROOT" && cmake --preset "$PRESET" >/dev/null)
fi
log "cmake --build --preset $PRESET"
(cd "$ROOT" && cmake --build --preset "$PRESET")
