#!/usr/bin/env bash
# 100k inferences of the example package on one Runtime; prints the resident-memory growth after warm-up.
#   benchmarks/soak.sh [PACKAGE] [ITERS]     (after `make demo`; FLAVOUR=cpu|cuda as for make)
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
package=${1:-$ROOT/build/models/identity_conv_net.pt2}
"$BUILD_DIR/bin/pt2rt_soak" "$package" --ops "$BUILD_DIR/lib/libidentity_conv_ops.so" --iters "${2:-100000}" --warmup 2000
