"""Exports the packages the C++ tests run (once per build: skipped when nothing that shapes them changed).

Writes into OUT: net_dynamic.pt2 (identity_conv_net, batch 1..32, CPU variants avx2, avx512, default), op_static.pt2
(the op alone), probe.pt2 (the op of probe_ops.cpp, which counts runs in flight), reductions.pt2 (parallel
reductions), multi_io.pt2 (two inputs sharing
the dynamic batch; float, int64 and bool outputs; with input and expected files), net_fp16.pt2 and
net_bf16.pt2 (half-precision exports), aliasing.pt2 (outputs that alias an input, a constant, each other), tensor files
for pt2run (net_input.pt, net_expected.pt, a list file), and bad/*.pt2: damaged or foreign packages.
--target linux-x86_64,linux-aarch64 (the cross build's tests): every package also holds an aarch64 variant.
--lite: also lite/ - op_static.pt2, net_dynamic.pt2 (the example net without its TorchBind object:
my_ops.models.identity_conv_net_lite) and multi_io.pt2 exported with lite variants, for the C API's tests against
pt2rt-lite (tests/c_api/lite_test.sh).
"""

import argparse
import functools
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import torch

import my_ops
import export_tools
from export_tools import compat, export_package, load_ops_library, read_spec, recurrent
from my_ops import models
from export_tools.layout import SPEC_KEY


# where inductor keeps its caches (it sets TORCHINDUCTOR_CACHE_DIR under $TMPDIR itself), not what it compiles
PLACES_NOT_SHAPING = {"TORCHINDUCTOR_CACHE_DIR"}


def fingerprint(probe_ops: Path, target: str | None, cpu_identity: str | None = None, lite: bool = False) -> str:
    """Everything that shapes the packages: the sources and libraries that make them, and what the compile sees of
    this machine (the CPU as torch and the compiler see it - an emulated host is another machine - and the compiler).
    cpu_identity: what the CPU is, given by the caller in place of asking torch and the compiler here (an emulated
    CPU's, looked up natively)."""
    from export_tools import cpu
    h = hashlib.sha256(torch.__version__.encode() + str(target).encode() + (b" lite" if lite else b""))
    sources = sorted(Path(export_tools.__file__).parent.glob("*.py")) + sorted(Path(my_ops.__file__).parent.glob("*.py"))
    # (lite: the lite runtime and the ops' lite builds check the lite variants; they do not shape them)
    for path in sources + [Path(__file__), my_ops.library_path(), probe_ops]:
        h.update(path.read_bytes())
    h.update(kernels_as_exported().encode())
    # the compiler by what it says it is, not by its path (scripts/emulate-x86.sh puts a wrapper in a new folder)
    version = subprocess.run([os.environ.get("CXX", "g++"), "--version"], capture_output=True, text=True).stdout
    cpu_seen = [cpu_identity] if cpu_identity else [cpu.host_arch(), torch.backends.cpu.get_cpu_capability(),
                                                     sorted(cpu.host_features())]
    h.update(json.dumps([*cpu_seen, version, sorted((k, v) for k, v in os.environ.items()
                                         if k.startswith("TORCHINDUCTOR_") and k not in PLACES_NOT_SHAPING)]).encode())
    return h.hexdigest()


def kernels_as_exported() -> str:
    """What of libpt2rt_kernels shapes a package: its ops' schemas and the dispatch keys they have kernels for (a
    package calls them by name; the golden cases come from eager). Not its bytes: those change with every kernel
    edit and hold the source folder's path, so a clone elsewhere would compile every package again."""
    if not recurrent._load(recurrent.find_library()):
        return "no kernels library"
    names = sorted(s.name for s in torch._C._jit_get_all_schemas() if s.name.startswith("pt2rt::"))
    seen = []
    for name in names:
        dump = torch._C._dispatch_dump(name).splitlines()
        seen += [line for line in dump if line.startswith("schema:")]
        seen += sorted(line.split(":")[0] for line in dump if ": registered at" in line and
                       not line.startswith(("debug", "name", "schema")))
    return json.dumps(seen)


def machine_cache() -> Path | None:
    """Test packages kept per machine (one folder per fingerprint), so a fresh clone of the same sources on the same
    machine does not compile them again: PT2RT_TEST_PACKAGES_CACHE, default ~/.cache/pt2rt/test-packages; 0: none."""
    value = os.environ.get("PT2RT_TEST_PACKAGES_CACHE")
    if value == "0":
        return None
    base = Path(value) if value else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pt2rt"
    return base if value else base / "test-packages"


def from_cache(cache: Path | None, fp: str, out: Path) -> bool:
    entry = cache / fp if cache else None
    if entry is None or not (entry / "fingerprint").is_file() or (entry / "fingerprint").read_text() != fp:
        return False
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(entry, out)
    os.utime(entry)  # recently used: kept when the cache is pruned
    print(f"test packages in {out}: copied from this machine's cache ({entry})")
    return True


def to_cache(cache: Path | None, fp: str, out: Path, keep: int = 12):
    if cache is None:
        return
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{fp}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(out, tmp)
    try:
        os.rename(tmp, cache / fp)  # whole or not at all; another process may have put the same entry first
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    entries = sorted((e for e in cache.iterdir() if not e.name.startswith(".")), key=lambda e: e.stat().st_mtime)
    for old in entries[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def rewrite(src: Path, dst: Path, edit_spec=None, edit_record=None):
    """Copy a package record by record, editing the spec or one record's bytes."""
    from torch.export.pt2_archive._package import PT2ArchiveReader, PT2ArchiveWriter
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / "tmp" / src.name  # the archive root is named after the file: keep the name, then rename
    tmp.parent.mkdir(exist_ok=True)
    with PT2ArchiveReader(str(src)) as reader, PT2ArchiveWriter(str(tmp)) as writer:
        for name in reader.get_file_names():
            if name == ".data/serialization_id":
                continue
            data = reader.read_bytes(name)
            if edit_spec and name.endswith("_metadata.json"):
                md = json.loads(data)
                spec = json.loads(md[SPEC_KEY])
                result = edit_spec(spec)
                if result is None:
                    del md[SPEC_KEY]
                else:
                    md[SPEC_KEY] = json.dumps(result)
                data = json.dumps(md).encode()
            if edit_record:
                data = edit_record(name, data)
            writer.write_bytes(name, data)
    os.replace(tmp, dst)
    tmp.parent.rmdir()


def with_spec(**changes):
    def edit(spec):
        spec.update(changes)
        return spec
    return edit


def export_probe(library: Path, path: Path) -> None:
    """A model around pt2rt_probe::hold, the op that counts how many runs are in flight (probe_ops.cpp)."""
    load_ops_library(library)
    torch.library.register_fake("pt2rt_probe::hold")(lambda x, micros: torch.empty_like(x))

    class Probe(torch.nn.Module):
        def forward(self, x):
            return torch.ops.pt2rt_probe.hold(x * 2, 5000)

    export_package(Probe(), [torch.randn(2, 3)], path, golden=1, cpu_isa="default")


class MultiIO(torch.nn.Module):
    """Two inputs sharing the dynamic batch; float, int64 (above 2^53, where double has no odd numbers) and bool
    outputs: joined --input files, list outputs, exact integer comparison."""
    def forward(self, x, y):
        return (torch.ops.my_ops.identity_conv_op(x) + y, x * y.sum(dim=(1, 2, 3), keepdim=True),
                (x > 0).sum(dim=(1, 2, 3)) + 2**53, x > y)


class Reductions(torch.nn.Module):
    """Whole-tensor reductions, large enough that inductor splits each over its thread team (per-thread partial
    results combined at the end): the package must run on any thread count, not the exporting process's."""
    def forward(self, x):
        return torch.stack([x.sum(), x.amax(), (x * x).mean()]), x.sum(dim=0)


class Recurrent(torch.nn.Module):
    """A 2-layer bidirectional GRU from a given state and a plain ReLU RNN without biases (batch first), which the
    exporter runs through libpt2rt_kernels.so's pt2rt::rnn_layer: the runtime must find that library next to itself.
    No LSTM: make test exports these packages on an emulated Haswell too, where eager's LSTM (oneDNN's AVX2 code
    under qemu-x86_64 7.2) is wrong by 0.25 - pt2rt::lstm_layer agrees with a plain torch loop there - so the
    export's golden check fails; test_export.py's recurrent package has one."""
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(6, 24, 2, bidirectional=True)
        self.rnn = torch.nn.RNN(48, 20, nonlinearity="relu", bias=False, batch_first=True)

    def forward(self, x, h0):
        y, h = self.gru(x, h0)
        return self.rnn(y.transpose(0, 1))[0], h


def export_multi_io(out: Path) -> None:
    g = torch.Generator().manual_seed(11)
    model = MultiIO()
    example = (torch.randn(2, 3, 4, 4, generator=g), torch.randn(2, 3, 4, 4, generator=g))
    export_package(model, example, out / "multi_io.pt2", dynamic_batch=(1, 8), golden=3, cpu_isa="default")
    x, y = torch.randn(3, 3, 4, 4, generator=g), torch.randn(3, 3, 4, 4, generator=g)
    torch.save(x, out / "multi_io_x.pt")
    torch.save(y, out / "multi_io_y.pt")
    torch.save([x, y], out / "multi_io_xy.pt")
    with torch.no_grad():
        torch.save(list(model(x, y)), out / "multi_io_expected.pt")


def export_lite(out: Path) -> None:
    """The C API tests' packages with lite variants (the default CPU variant and its lite build)."""
    out.mkdir()
    net, net_inputs = models.identity_conv_net_lite()
    export_package(net, net_inputs, out / "net_dynamic.pt2", dynamic_batch=(1, 32), cpu_isa="default", lite=True)
    op_model, op_inputs = models.identity_conv_op_only()
    export_package(op_model, op_inputs, out / "op_static.pt2", cpu_isa="default", lite=True)
    g = torch.Generator().manual_seed(11)
    export_package(MultiIO(), (torch.randn(2, 3, 4, 4, generator=g), torch.randn(2, 3, 4, 4, generator=g)),
                   out / "multi_io.pt2", dynamic_batch=(1, 8), golden=2, cpu_isa="default", lite=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--probe-ops", required=True, type=Path, help="libpt2rt_probe_ops.so (tests/cpp/probe_ops.cpp)")
    parser.add_argument("--target", default=None, help="export_package's target for every package")
    parser.add_argument("--cpu-identity", default=None,
                        help="what the CPU is (scripts/test-x86-hosts.sh: the emulated compiler's -march=native)")
    parser.add_argument("--lite", action="store_true", help="also lite/: packages with lite variants")
    parser.add_argument("--cache-only", action="store_true",
                        help="take the packages from the machine's cache or exit 3; export nothing")
    args = parser.parse_args()
    global export_package
    export_package = functools.partial(export_package, target=args.target)
    out = args.out
    stamp = out / "fingerprint"
    fp = fingerprint(args.probe_ops, args.target, args.cpu_identity, args.lite)
    if stamp.is_file() and stamp.read_text() == fp:
        print(f"test packages in {out} are up to date")
        return 0
    cache = machine_cache()
    if from_cache(cache, fp, out):
        return 0
    if args.cache_only:
        print(f"test packages for {out}: not in this machine's cache")
        return 3
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    model, inputs = models.identity_conv_net()
    net = export_package(model, inputs, out / "net_dynamic.pt2", dynamic_batch=(1, 32),
                         cpu_isa=("avx2", "avx512", "default"), metadata={"purpose": "tests"})  # pytest's too
    op_model, op_inputs = models.identity_conv_op_only()
    export_package(op_model, op_inputs, out / "op_static.pt2")
    for name, factory in (("net_fp16", models.identity_conv_net_fp16), ("net_bf16", models.identity_conv_net_bf16)):
        half_model, half_inputs = factory()
        export_package(half_model, half_inputs, out / f"{name}.pt2", golden=2)

    aliasing, aliasing_inputs = models.aliasing_outputs()
    export_package(aliasing, aliasing_inputs, out / "aliasing.pt2", dynamic_batch=(1, 8), golden=2, cpu_isa="default")
    export_probe(args.probe_ops, out / "probe.pt2")
    export_package(Reductions(), [torch.randn(512, 256, generator=torch.Generator().manual_seed(5))],
                   out / "reductions.pt2", golden=2, cpu_isa="default")
    export_multi_io(out)
    torch.manual_seed(12)
    batch = torch.export.Dim("batch", min=1, max=4)  # dim 1 of both (time-major): the kernels' shapes are symbolic
    export_package(Recurrent().eval(), (torch.randn(9, 2, 6), torch.randn(4, 2, 24)), out / "recurrent.pt2", golden=3,
                   cpu_isa="default", dynamic_shapes=({1: batch}, {1: batch}))

    if args.lite:
        export_lite(out / "lite")

    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    torch.save(x, out / "net_input.pt")
    if args.lite:
        torch.save(x, out / "lite" / "net_input.pt")  # test_c_api.c loads it as a package: not one
    with torch.no_grad():
        torch.save(model(x), out / "net_expected.pt")
    torch.save([x, x], out / "two_tensors.pt")
    # inputs of the wrong shape or dtype, for the bad-input matrix
    torch.save(x[0], out / "rank3.pt")
    torch.save(torch.randn(3, 3, 64, 32), out / "big_hw.pt")
    torch.save(torch.randn(3, 3, 16, 32), out / "small_hw.pt")
    torch.save(torch.randn(33, 3, 32, 32), out / "batch33.pt")
    torch.save(torch.randn(0, 3, 32, 32), out / "batch0.pt")
    torch.save(torch.ones(3, 3, 32, 32, dtype=torch.int64), out / "int64.pt")
    # unusual but valid inputs, with the eager model's answers
    unusual = {
        "channels_last": x.contiguous(memory_format=torch.channels_last),
        "sliced": torch.randn(3, 3, 64, 32, generator=torch.Generator().manual_seed(8))[:, :, ::2, :],
        "nonfinite": x.clone().index_put_((torch.tensor([0]), torch.tensor([1]), torch.tensor([2]), torch.tensor([3])),
                                          torch.tensor(float("nan"))).index_put_(
            (torch.tensor([1]), torch.tensor([0]), torch.tensor([5]), torch.tensor([6])), torch.tensor(float("inf"))),
    }
    for name, value in unusual.items():
        torch.save(value, out / f"{name}_input.pt")
        with torch.no_grad():
            torch.save(model(value.contiguous()), out / f"{name}_expected.pt")
    torch.save({"x": x}, out / "dict.pt")
    torch.save(x.double(), out / "net_input_float64.pt")

    bad = out / "bad"
    bad.mkdir()
    data = net.read_bytes()
    (bad / "empty.pt2").write_bytes(b"")
    (bad / "truncated.pt2").write_bytes(data[: len(data) // 2])
    (bad / "random.pt2").write_bytes(random.Random(0).randbytes(100_000))
    with zipfile.ZipFile(bad / "not_package.pt2", "w") as zf:
        zf.writestr("archive/hello.txt", "not a model")
    (bad / "text.pt").write_text("not a tensor file")

    def cut_library(name, data):
        return data[: len(data) // 2] if name.endswith(".wrapper.so") else data

    def flip_library(name, data):
        if not name.endswith(".wrapper.so"):
            return data
        mutable = bytearray(data)
        for i in range(4096, len(mutable), 4096):
            mutable[i] ^= 0xFF
        return bytes(mutable)

    def junk_library(name, data):
        return b"not an ELF file " * 1000 if name.endswith(".wrapper.so") else data

    rewrite(net, bad / "damaged_lib.pt2", edit_record=flip_library)
    rewrite(net, bad / "junk_lib.pt2", edit_record=junk_library)
    rewrite(net, bad / "cut_lib.pt2", edit_record=cut_library)
    rewrite(net, bad / "no_spec.pt2", edit_spec=lambda spec: None)
    rewrite(net, bad / "bad_spec_format.pt2", edit_spec=with_spec(format="pt2rt-spec/99"))

    def variants(edit):
        return lambda s: {**s, "variants": [edit(dict(v)) for v in s["variants"]]}

    # avx5124fmaps: Knights Mill only - no host that runs these tests has it
    rewrite(net, bad / "missing_feature.pt2",
            edit_spec=variants(lambda v: {**v, "cpu_features": v["cpu_features"] + ["avx5124fmaps"]}))
    rewrite(net, bad / "unknown_feature.pt2",
            edit_spec=variants(lambda v: {**v, "cpu_features": v["cpu_features"] + ["quantum_flux"]}))
    rewrite(net, bad / "other_arch.pt2", edit_spec=variants(lambda v: {**v, "arch": "aarch64"}))
    rewrite(net, bad / "variant_outside_its_folder.pt2",
            edit_spec=lambda s: {**s, "variants": [{**s["variants"][0], "record": s["variants"][1]["record"]}]})
    # hostile packages (docs/runtime.md, "Trust")
    from torch.export.pt2_archive._package import PT2ArchiveReader, PT2ArchiveWriter

    def add_records(src, dst, extra):
        with PT2ArchiveReader(str(src)) as reader:
            records = {n: reader.read_bytes(n) for n in reader.get_file_names() if n != ".data/serialization_id"}
        tmp = dst.parent / "tmp" / src.name
        tmp.parent.mkdir(exist_ok=True)
        with PT2ArchiveWriter(str(tmp)) as writer:
            for n, data in {**records, **extra}.items():
                writer.write_bytes(n, data)
        os.replace(tmp, dst)
        tmp.parent.rmdir()

    folder = read_spec(net)["variants"][0]["record"].rsplit("/", 1)[0]
    add_records(net, bad / "zip_slip.pt2", {folder + "/" + "../" * 16 + "tmp/pt2rt-zip-slip-target": b"overwritten"})
    add_records(net, bad / "second_library.pt2", {v["record"].rsplit("/", 1)[0] + "/other.wrapper.so": b"\x7fELF"
                                                   for v in read_spec(net)["variants"]})
    # the local version ("+cpu", "+cu130") is not part of the ABI check
    rewrite(net, bad / "other_local_version.pt2",
            edit_spec=with_spec(torch_version=torch.__version__.split("+")[0] + "+cu999"))
    not_there = {"name": "my_ops::NotThere", "namespace": "my_ops", "methods": ["forward"],
                 "library": "libidentity_conv_ops.so"}
    rewrite(net, bad / "missing_class.pt2", edit_spec=lambda s: {**s, "custom_classes": s["custom_classes"] + [not_there]})
    # the same with an op of pt2rt's kernels library, found next to the runtime after the caller's my_ops library
    kernel_op = {"name": "pt2rt::rnn_layer", "overload": "", "namespace": "pt2rt", "library": "libpt2rt_kernels.so",
                 "schema": "pt2rt::rnn_layer(Tensor gi, Tensor h0, Tensor[] whh_t, Tensor[] bhh, str mode, "
                           "bool batch_first) -> (Tensor, Tensor)"}
    rewrite(net, bad / "missing_class_and_a_kernel.pt2", edit_spec=lambda s: {
        **s, "custom_classes": s["custom_classes"] + [not_there], "custom_ops": s["custom_ops"] + [kernel_op],
        "libraries": s["libraries"] + ["libpt2rt_kernels.so"]})
    # another build of the ops library than the package was exported with
    rewrite(net, bad / "stale_op_schema.pt2", edit_spec=lambda s: {**s, "custom_ops": [
        {**o, "schema": o["schema"].replace("(Tensor x)", "(Tensor x, int k=3)")} for o in s["custom_ops"]]})
    cls = "__torch__.torch.classes.my_ops.IdentityConvClass"
    rewrite(net, bad / "stale_class_schema.pt2", edit_spec=lambda s: {**s, "custom_classes": [
        {**c, "method_schemas": {**c["method_schemas"], "forward": f"forward({cls} _0, Tensor _1, Tensor _2) -> Tensor _0"}}
        for c in s["custom_classes"]]})
    rewrite(net, bad / "stale_class_method.pt2", edit_spec=lambda s: {**s, "custom_classes": [
        {**c, "method_schemas": {**c["method_schemas"], "forward_v2": f"forward_v2({cls} _0) -> Tensor _0"}}
        for c in s["custom_classes"]]})
    rewrite(net, bad / "missing_op.pt2", edit_spec=lambda s: {**s, "custom_ops": s["custom_ops"] + [
        {"name": "my_ops::not_there", "namespace": "my_ops", "library": "libidentity_conv_ops.so"}]})
    rewrite(net, bad / "library_path.pt2", edit_spec=lambda s: {**s, "libraries": ["../../tmp/x/libevil.so"]})
    # a lite build named by a package is its library's, never another (a full ops library would load libtorch)
    rewrite(net, bad / "lite_library_other.pt2", edit_spec=lambda s: {**s, "custom_ops": [
        {**o, "lite_library": "libidentity_conv_ops.so"} for o in s["custom_ops"]]})
    rewrite(net, bad / "newline_in_name.pt2", edit_spec=lambda s: {
        **s, "custom_ops": [{**o, "name": o["name"] + "\npt2run: verified: 4 of 4 golden cases passed"}
                            for o in s["custom_ops"]]})
    rewrite(net, bad / "deep_metadata.pt2", edit_record=lambda n, d: (d[:-1] + b', "deep": ' + b"[" * 100000 + b"]" * 100000 + b"}")
            if n.endswith("_metadata.json") else d)
    # a metadata record of 17 MiB (over the 16 MiB limit), deflated to a few KB
    with zipfile.ZipFile(net) as src, zipfile.ZipFile(bad / "huge_metadata.pt2", "w") as dst:
        first = sorted(n for n in src.namelist() if n.endswith("_metadata.json"))[0]
        for info in src.infolist():
            data = src.read(info)
            if info.filename == first:
                data = data[:-1] + b", " + b" " * (17 << 20) + b'"pad": 1}'
            dst.writestr(info.filename, data, compress_type=zipfile.ZIP_DEFLATED if info.filename == first else
                         zipfile.ZIP_STORED)

    # 1.6 KB files whose tensors claim 430 GB once made contiguous (stride 0): refused before any copy
    huge = torch.zeros(1).expand(35_000_000, 3, 32, 32)
    torch.save(huge, out / "stride0_huge.pt")
    from export_tools import golden as golden_format
    from export_tools.layout import GOLDEN_RECORD
    from export_tools.package import read_golden
    cases = read_golden(net)
    buf = io.BytesIO()
    torch.save({"format": golden_format.FORMAT, "names": [c.name for c in cases],
                "inputs": [[huge] if i == 0 else c.inputs for i, c in enumerate(cases)],
                "outputs": [c.outputs for c in cases]}, buf)
    add_records(net, bad / "golden_stride0.pt2", {GOLDEN_RECORD: buf.getvalue()})

    # a PT2 archive that torch reads, without AOTInductor's model folder
    with PT2ArchiveWriter(str(bad / "no_model.pt2")) as writer:
        writer.write_bytes("data/other/readme.txt", b"a PT2 archive, but no AOTInductor model in it")

    # golden cases that do not match what the package computes: verify must fail, and say how
    def golden_record(cases, edit):
        """The golden record of `cases` with edit(case index, output index, tensor) applied to every output."""
        out_cases = [[edit(i, o, t) for o, t in enumerate(c.outputs)] for i, c in enumerate(cases)]
        buf = io.BytesIO()
        torch.save({"format": golden_format.FORMAT, "names": [c.name for c in cases],
                    "inputs": [c.inputs for c in cases], "outputs": out_cases}, buf)
        return {GOLDEN_RECORD: buf.getvalue()}

    def with_outputs(edit):
        return golden_record(cases, lambda i, o, t: edit(i, t))

    add_records(net, bad / "golden_wrong_values.pt2", with_outputs(lambda i, t: t + 0.5 if i == 1 else t))
    add_records(net, bad / "golden_wrong_shape.pt2", with_outputs(lambda i, t: t[:, :4].contiguous() if i == 0 else t))
    add_records(net, bad / "golden_wrong_dtype.pt2", with_outputs(lambda i, t: t.double() if i == 0 else t))
    # NaN where the package computes a number: a mismatch, even though NaN equals NaN elsewhere
    add_records(net, bad / "golden_nan.pt2", with_outputs(
        lambda i, t: t.clone().index_fill_(1, torch.tensor([0]), float("nan")) if i == 2 else t))

    # integer and bool outputs compare exactly (package-format.md), in their own type
    multi = out / "multi_io.pt2"
    multi_cases = read_golden(multi)

    def int_off_by_one_where_double_cannot_tell(i, o, t):
        if i != 0 or o != 2:
            return t
        # 2^53 + s + 1 rounds to 2^53 + s in double when s % 4 == 0
        hit = (t - 2**53) % 4 == 0
        assert hit.any(), t
        return torch.where(hit, t + 1, t)

    add_records(multi, bad / "golden_int_near_2p53.pt2", golden_record(multi_cases, int_off_by_one_where_double_cannot_tell))
    tampered = out / "tmp_int_tolerance.pt2"
    rewrite(multi, tampered, edit_spec=lambda s: {**s, "golden": {**s["golden"], "tolerances": {
        **s["golden"]["tolerances"], "int64": {"rtol": 0.5, "atol": 5}, "bool": {"rtol": 1, "atol": 1}}}})
    add_records(tampered, bad / "golden_int_within_a_tolerance.pt2",
                golden_record(multi_cases, lambda i, o, t: t + 1 if (i, o) == (1, 2) else t))
    add_records(tampered, bad / "golden_bool_flipped.pt2",
                golden_record(multi_cases, lambda i, o, t: t.logical_not() if (i, o) == (2, 3) else t))
    tampered.unlink()

    # what the exporter sees of this host and of torch's ISAs, for the runtime to check its own view against
    from export_tools import cpu
    (out / "python_cpu.json").write_text(json.dumps({
        "host_features": sorted(cpu.host_features()),
        "compiler_features": sorted(cpu.compiler_features()),
        "torch_isa_features": {str(i): list(cpu.features_for_flags(("-march=x86-64", *i.build_arch_flags().split())))
                               for i in cpu.every_torch_isa() if type(i).__name__.startswith(("VecAVX", "VecAMX"))},
    }))
    rewrite(net, bad / "other_torch.pt2", edit_spec=with_spec(torch_version="2.0.0+cpu"))
    # export_tools.compat's rule: a package from this torch's minor or an older one in the range loads, a newer
    # one does not (the library is this torch's in all of them: only the spec's claim differs)
    major, minor, patch = compat.parse(torch.__version__)
    rewrite(net, bad / "newer_torch.pt2", edit_spec=with_spec(torch_version=f"{major}.{minor + 1}.0+cpu"))
    rewrite(net, bad / "other_patch.pt2", edit_spec=with_spec(torch_version=f"{major}.{minor}.{patch + 7}"))
    rewrite(net, bad / "older_torch_in_range.pt2",
            edit_spec=with_spec(torch_version=f"{major}.{max(compat.OLDEST[1], minor - 1)}.0"))
    rewrite(net, bad / "cuda_device.pt2", edit_spec=with_spec(device="cuda", cuda={"version": "13.0",
                                                                                    "compute_capability": "9.0"}))
    rewrite(net, bad / "unknown_library.pt2",
            edit_spec=lambda s: {**s, "libraries": ["libnot_there.so"],
                                 "custom_ops": [{**o, "library": "libnot_there.so"} for o in s["custom_ops"]],
                                 "custom_classes": [{**c, "library": "libnot_there.so"} for c in s["custom_classes"]]})
    stamp.write_text(fp)
    to_cache(cache, fp, out)
    print(f"exported test packages into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
