"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/<target>/). Run once; its output is committed.

    python tests/fuzz/make_seeds.py PACKAGE.pt2 [PACKAGE.pt2 ...]

Spec seeds come from real packages (their AOTI metadata record and the pt2rt spec inside it); tensor and golden
seeds are small torch.save files in the formats pt2run and the runtime read, kept small so mutations stay cheap.
"""

from __future__ import annotations

import argparse
import io
import json
import zipfile
from pathlib import Path

import torch

from export_tools import golden

HERE = Path(__file__).resolve().parent


def saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def spec_seeds(packages: list[Path], out: Path) -> None:
    for pkg in packages:
        with zipfile.ZipFile(pkg) as z:
            name = sorted(n for n in z.namelist() if n.endswith("_metadata.json"))[0]
            metadata = z.read(name)
        (out / f"{pkg.stem}-metadata.json").write_bytes(metadata)
        spec = json.loads(metadata)["pt2rt_spec"]
        (out / f"{pkg.stem}-spec.json").write_text(spec)
    broken_spec_seeds(json.loads(spec), out)


def broken_spec_seeds(spec: dict, out: Path) -> None:
    """Specs the parser must refuse, one fault each (their messages are in tests/fuzz/expected/spec.txt)."""
    def write(name: str, change) -> None:
        s = json.loads(json.dumps(spec))
        change(s)
        (out / f"broken-{name}-spec.json").write_text(json.dumps(s))
    write("unknown-dtype", lambda s: s["inputs"][0].update(dtype="complex32"))
    write("dim-out-of-range", lambda s: s["inputs"][0].update(dynamic_dims=[
        {"dim": len(s["inputs"][0]["shape"]), "name": "batch", "min": 1, "max": 4}]))
    write("min-above-max", lambda s: s["inputs"][0].update(dynamic_dims=[
        {"dim": 0, "name": "batch", "min": 5, "max": 4}]))
    write("no-variants", lambda s: s.update(variants=[]))
    write("shape-not-a-list", lambda s: s["inputs"][0].update(shape="1x3"))
    write("derived-scale-zero", lambda s: s["inputs"][0].update(dynamic_dims=[
        {"dim": 0, "name": "2*b", "of": "b", "scale": 0, "offset": 0, "min": 2, "max": 8}]))
    write("degenerate-output-index", lambda s: s["golden"].update(degenerate_outputs=[len(s["outputs"])]))
    # and one the parser takes: a derived dim (2*b + 1 of b)
    ok = json.loads(json.dumps(spec))
    ok["inputs"][0]["dynamic_dims"] = [{"dim": 0, "name": "2*b+1", "expr": "2*b+1", "of": "b", "scale": 2,
                                        "offset": 1, "min": 3, "max": 65}]
    (out / "derived-dim-spec.json").write_text(json.dumps(ok))


def tensor_seeds(out: Path) -> None:
    g = torch.Generator().manual_seed(0)
    seeds = {
        "float32": torch.randn(2, 3, generator=g),
        "list": [torch.randn(1, 2, 3, 3, generator=g), torch.ones(2)],
        "tuple": (torch.zeros(1, 1, 2, 2),),
        "bfloat16": torch.randn(2, 2, generator=g).bfloat16(),
        "float16": torch.randn(3, generator=g).half(),
        "int64": torch.arange(6).reshape(2, 3),
        "bool": torch.tensor([True, False]),
        "strided-view": torch.arange(12.0)[2:10:2],
        "channels-last": torch.randn(1, 2, 2, 2, generator=g).to(memory_format=torch.channels_last),
        "empty": torch.empty(0, 3),
        "scalar": torch.tensor(1.5),
        "dict": {"x": torch.ones(1)},
        "string": "not a tensor",
    }
    for name, obj in seeds.items():
        (out / f"{name}.pt").write_bytes(saved(obj))


def golden_seeds(out: Path) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 3, 3, generator=g)
    cases = [golden.Case("example", [x], [x.clone()]),
             golden.Case("random_0_batch2", [torch.randn(2, 2, 3, 3, generator=g)], [torch.zeros(2, 2, 3, 3)])]
    (out / "two-cases.pt").write_bytes(golden.dumps(cases))
    (out / "bf16.pt").write_bytes(golden.dumps([golden.Case("example", [x.bfloat16()], [x.bfloat16()])]))
    (out / "no-cases.pt").write_bytes(golden.dumps([]))
    (out / "not-a-dict.pt").write_bytes(saved([x]))
    names, inputs, outputs = ["example"], [[x]], [[x.clone()]]
    (out / "no-outputs.pt").write_bytes(saved({"names": names, "inputs": inputs}))
    (out / "counts-differ.pt").write_bytes(saved({"names": names * 2, "inputs": inputs, "outputs": outputs}))
    (out / "not-a-tensor.pt").write_bytes(saved({"names": names, "inputs": [[1.5]], "outputs": outputs}))
    (out / "name-not-a-string.pt").write_bytes(saved({"names": [3], "inputs": inputs, "outputs": outputs}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="+", type=Path, help="exported packages to take spec seeds from")
    args = parser.parse_args()
    for target, make in (("spec", lambda d: spec_seeds(args.packages, d)), ("tensors", tensor_seeds),
                         ("golden", golden_seeds)):
        d = HERE / "corpus" / target
        d.mkdir(parents=True, exist_ok=True)
        make(d)
        print(f"{d}: {len(list(d.iterdir()))} files")


if __name__ == "__main__":
    main()
