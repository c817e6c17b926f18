#!/usr/bin/env bash
# A user's own operator, end to end, as docs/ops.md walks it: `export-tools new-op` writes a project, it builds
# against an installed pt2rt (find_package(pt2rt), pt2rt_add_ops_library) and the venv's torch, its own tests
# pass, a model using it and my_ops exports to one package, and pt2run runs that package - its own library by --ops
# and my_ops by the search, then both by the search once installed beside the runtime - equal to eager; then the
# same with --lite, run by pt2rt-lite's pt2run on the two libraries' lite builds, with no libtorch loaded.
#   end_to_end.sh BUILD_DIR PYTHON [lite]   (lite: the pt2rt-lite part too; ctest passes it where lite is tested)
set -euo pipefail
BUILD=$1 PYTHON=$2 LITE=${3:-}
# One folder per build tree, at the same place in every clone: the compiler cache (CCACHE_BASEDIR, the checkout)
# then hits what an earlier run compiled of the same sources.
WORK=$BUILD/scaffold-end-to-end
rm -rf "$WORK"
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
CMAKE=$(dirname "$PYTHON")/cmake; [ -x "$CMAKE" ] || CMAKE=cmake
echo "== install the runtime's CMake package -> $WORK/dist"
"$CMAKE" --install "$BUILD" --prefix dist >/dev/null
echo "== export-tools new-op acme::scale2"
"$PYTHON" -m export_tools new-op acme::scale2 --out proj
torch_prefix=$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
echo "== build it"
"$CMAKE" -S proj -B proj/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$WORK/dist;$torch_prefix" >configure.log 2>&1 \
  || { cat configure.log; exit 1; }
"$CMAKE" --build proj/build -j "$(nproc)"
echo "== its own tests"
PYTHONPATH=proj/python${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" -m pytest -q -p no:cacheprovider --rootdir proj proj/tests
echo "== a model using acme::scale2 and my_ops -> one package"
cat > export_both.py <<'PY'
import sys, torch
import acme_ops  # noqa: F401  (loads build/libacme_ops.so, registers its fake)
from export_tools import export_package, read_spec
from my_ops import models

class Both(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net, _ = models.identity_conv_net()
    def forward(self, x):
        return torch.ops.acme.scale2(self.net(torch.ops.my_ops.identity_conv_op(x)))

model = Both().eval()
path = export_package(model, (torch.randn(2, 3, 32, 32),), sys.argv[1], dynamic_batch=(1, 8), golden=2,
                      cpu_isa="default")
libraries = read_spec(path)["libraries"]
assert libraries == ["libacme_ops.so", "libidentity_conv_ops.so"], libraries
y = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(5))
torch.save(y, sys.argv[2])
with torch.no_grad():
    torch.save(model(y), sys.argv[3])
PY
PYTHONPATH=proj/python${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" export_both.py both.pt2 in.pt eager.pt
echo "== pt2run, the new library by --ops (libidentity_conv_ops.so still found next to libpt2rt.so)"
env -u PT2RT_OPS_PATH "$BUILD/bin/pt2run" run both.pt2 --ops proj/build/libacme_ops.so --input in.pt --output out.pt
"$PYTHON" -c "
import sys, torch
torch.testing.assert_close(torch.load(sys.argv[1]), torch.load(sys.argv[2]), rtol=1.3e-6, atol=1e-5)
print('pt2run output equals eager')" out.pt eager.pt
echo "== cmake --install the op beside the runtime: lib/, RUNPATH \$ORIGIN"
"$CMAKE" --install proj/build --prefix dist >/dev/null
runpath=$(readelf -d dist/lib/libacme_ops.so | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
[ "$runpath" = '$ORIGIN' ] || { echo "installed libacme_ops.so has RUNPATH '$runpath', expected \$ORIGIN"; exit 1; }
echo "== pt2run, the libraries by the search (next to libpt2rt.so; PT2RT_OPS_PATH)"
env -i PT2RT_OPS_PATH="$WORK/dist/lib" "$BUILD/bin/pt2run" verify both.pt2
if [ "$LITE" != lite ]; then
  echo "end to end: PASSED (pt2rt-lite not tested in this build)"
  exit 0
fi
echo "== pt2rt-lite: a model using acme::scale2 and my_ops::identity_conv_op -> export --lite"
cat > export_lite.py <<'PY'
import sys, torch
import acme_ops  # noqa: F401
from export_tools import export_package, read_spec
from my_ops import models

class Both(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net, _ = models.identity_conv_net_lite()
    def forward(self, x):
        return torch.ops.acme.scale2(self.net(x))

model = Both().eval()
path = export_package(model, (torch.randn(2, 3, 32, 32),), sys.argv[1], dynamic_batch=(1, 8), golden=2,
                      cpu_isa="default", lite=True)
# the depthwise convolution is pt2rt's kernel, which lite runs itself (no lite library)
lite = {o["name"]: o.get("lite_library") for o in read_spec(path)["custom_ops"]}
assert lite == {"acme::scale2": "libacme_ops_lite.so", "my_ops::identity_conv_op": "libidentity_conv_ops_lite.so",
                "pt2rt::depthwise_conv2d": None}, lite
y = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(6)).contiguous(memory_format=torch.channels_last)
torch.save(y, sys.argv[2])
with torch.no_grad():
    torch.save(model(y), sys.argv[3])
PY
PYTHONPATH=proj/python${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" export_lite.py lite.pt2 lite_in.pt lite_eager.pt
echo "== pt2rt-lite's pt2run, the new lite build by --ops (my_ops' next to the lite runtime)"
env -u PT2RT_OPS_PATH LD_DEBUG=libs LD_DEBUG_OUTPUT="$WORK/ld" "$BUILD/bin/pt2run_lite" run lite.pt2 \
  --ops proj/build/libacme_ops_lite.so --input lite_in.pt --output lite_out.pt
if grep -hE 'calling init: .*/lib(torch|c10|python)[^/]*$' "$WORK"/ld.*; then echo "pt2run_lite loaded libtorch" >&2; exit 1; fi
grep -hq 'calling init: .*libacme_ops_lite.so' "$WORK"/ld.* || { echo "libacme_ops_lite.so was not loaded" >&2; exit 1; }
"$PYTHON" -c "
import sys, torch
torch.testing.assert_close(torch.load(sys.argv[1]), torch.load(sys.argv[2]), rtol=1e-5, atol=1e-5)
print('pt2run (lite) output equals eager')" lite_out.pt lite_eager.pt
echo "end to end: PASSED"
