"""Writes the fuzzers' seed corpus (tests/fuzz/corpus/<target>/). Run once; its output is committed.

    python tests/fuzz/make_seeds.py PACKAGE.pt2 [PACKAGE.pt2 ...]
    python tests/fuzz/make_seeds.py --only infer_request        # one target's seeds

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


def infer_request_seeds(out: Path) -> None:
    """HTTP infer request bodies for fuzz_infer_request.cpp's spec (x FP32 [-1,3,2,2], ids INT64 [-1], mask BOOL [-1],
    small INT8 [2], half FP16 [2]; outputs y, z, w): a first line "H<n>" is the Inference-Header-Content-Length."""
    import struct

    def request(inputs, outputs=None, parameters=None, blobs=b"", header=True, **extra):
        body = {"inputs": inputs, **({"outputs": outputs} if outputs is not None else {}),
                **({"parameters": parameters} if parameters is not None else {}), **extra}
        text = json.dumps(body).encode()
        return (b"H%d\n" % len(text) if header else b"") + text + blobs

    half = {"name": "half", "shape": [2], "datatype": "FP16", "parameters": {"binary_data_size": 4}}
    x = {"name": "x", "shape": [1, 3, 2, 2], "datatype": "FP32", "data": [[[[0.5, -1], [2, 3]]] * 3]}
    ids = {"name": "ids", "shape": [3], "datatype": "INT64", "data": [1, -2, 9007199254740993]}
    mask = {"name": "mask", "shape": [2], "datatype": "BOOL", "data": [True, 0]}
    small = {"name": "small", "shape": [2], "datatype": "INT8", "data": [-128, 127.0]}
    fp16 = struct.pack("<2e", 1.5, -2.0)
    seeds = {
        "ok-json-and-binary.txt": request([x, ids, mask, small, half], [{"name": "y"}, {"name": "w", "parameters":
                                          {"binary_data": True}}], blobs=fp16, id="r1"),
        "ok-all-binary.txt": request(
            [{"name": n, "shape": sh, "datatype": dt, "parameters": {"binary_data_size": len(b)}}
             for n, sh, dt, b in (("x", [2, 3, 2, 2], "FP32", struct.pack("<24f", *range(24))),
                                  ("ids", [1], "INT64", struct.pack("<q", 7)), ("mask", [1], "BOOL", b"\x01"),
                                  ("small", [2], "INT8", b"\x01\xff"), ("half", [2], "FP16", fp16))],
            parameters={"binary_data_output": True},
            blobs=struct.pack("<24f", *range(24)) + struct.pack("<q", 7) + b"\x01" + b"\x01\xff" + fp16),
        "missing-half-json-only.txt": request([x, ids, mask, small], header=False),
        "int8-out-of-range.txt": request([x, ids, mask, {**small, "data": [300, 1]}, half], blobs=fp16),
        "float-for-int.txt": request([x, {**ids, "data": [1.5, 2, 3]}, mask, small, half], blobs=fp16),
        "fp32-out-of-range.txt": request([{**x, "data": [1e39] + [0] * 11}, ids, mask, small, half], blobs=fp16),
        "shape-overflow.txt": request([{**x, "shape": [4611686018427387904, 4]}], header=False),
        "negative-dim.txt": request([{**x, "shape": [-1, 3, 2, 2]}], header=False),
        "truncated-binary.txt": request([x, ids, mask, small, half], blobs=fp16[:3]),
        "header-not-a-number.txt": b"H12abc\n" + request([x], header=False),
        "header-past-body.txt": b"H99999\n" + request([x], header=False),
        "garbage.txt": b"{\"inputs\": [",
        "input-twice.txt": request([x, x], header=False),
        "unknown-output.txt": request([x, ids, mask, small, half], [{"name": "nope"}], blobs=fp16),
        "fp16-output-as-json.txt": request([x, ids, mask, small, half], [{"name": "w"}], blobs=fp16),
        "deep-nesting.txt": request([{**x, "data": json.loads("[" * 500 + "1" + "]" * 500)}], header=False),
        "parameters-not-an-object.txt": request([x, ids, mask, small, half], parameters=[1], blobs=fp16),
    }
    for name, data in seeds.items():
        (out / name).write_bytes(data)


def grpc_request_seeds(out: Path) -> None:
    """Serialized gRPC ModelInferRequests for fuzz_grpc_request.cpp's spec (that of infer_request; with model_name
    "typed" the spec without the FP16 input, so a request of typed contents only can be whole)."""
    import struct

    from tritonclient.grpc import service_pb2 as pb

    fp16 = struct.pack("<2e", 1.5, -2.0)
    raw = {"x": ([2, 3, 2, 2], "FP32", struct.pack("<24f", *range(24))), "ids": ([1], "INT64", struct.pack("<q", 7)),
           "mask": ([1], "BOOL", b"\x01"), "small": ([2], "INT8", b"\x01\xff"), "half": ([2], "FP16", fp16)}
    typed = {"x": ([1, 3, 2, 2], "FP32", "fp32_contents", [0.5, -1, 2, 3] * 3),
             "ids": ([3], "INT64", "int64_contents", [1, -2, 9007199254740993]),
             "mask": ([2], "BOOL", "bool_contents", [True, False]), "small": ([2], "INT8", "int_contents", [-128, 127])}

    def request(inputs=(), raws=None, outputs=(), model="m", **changes):
        q = pb.ModelInferRequest(model_name=model, id="r1")
        for name, (shape, dt, *rest) in inputs:
            t = q.inputs.add(name=name, datatype=dt, shape=shape)
            if len(rest) == 2:
                getattr(t.contents, rest[0]).extend(rest[1])
            if name in changes:
                changes[name](t)
        q.raw_input_contents.extend(raws or [])
        for name in outputs:
            q.outputs.add(name=name)
        return q.SerializeToString()

    def all_raw(**changes):
        return request(((n, v[:2]) for n, v in raw.items()), [v[2] for v in raw.values()], ("y", "w"), **changes)

    def all_typed(**values):
        return request(((n, (sh, dt, field, values.get(n, vals))) for n, (sh, dt, field, vals) in typed.items()),
                       model="typed")

    seeds = {
        "ok-raw.bin": all_raw(),
        "ok-typed.bin": all_typed(),
        "int8-above-range.bin": all_typed(small=[300, 1]),
        "int8-below-range.bin": all_typed(small=[0, -129]),
        "too-few-values.bin": all_typed(x=[0.5] * 11),
        "wrong-field.bin": request([("x", ([1, 3, 2, 2], "FP32", "fp64_contents", [0.5] * 12))], model="typed"),
        "fp16-typed.bin": request([("half", ([2], "FP16", "fp32_contents", [1.5, -2.0]))]),
        "raw-and-contents.bin": all_raw(x=lambda t: t.contents.fp32_contents.extend([1.0])),
        "raw-count-mismatch.bin": request(((n, v[:2]) for n, v in raw.items()), [v[2] for v in raw.values()][:4]),
        "raw-wrong-size.bin": request([("x", ([2, 3, 2, 2], "FP32"))], [struct.pack("<24f", *range(24))[:47]]),
        "unknown-output.bin": request(((n, v[:2]) for n, v in raw.items()), [v[2] for v in raw.values()], ("nope",)),
        "unknown-input.bin": request([("nope", ([1], "FP32"))], [b"\0" * 4]),
        "wrong-datatype.bin": request([("x", ([2, 3, 2, 2], "FP64"))], [b"\0" * 192]),
        "shape-overflow.bin": request([("x", ([4611686018427387904, 4], "FP32"))], [b""]),
        "negative-dim.bin": request([("x", ([-1, 3, 2, 2], "FP32"))], [b""]),
        "input-twice.bin": request([("x", ([1, 3, 2, 2], "FP32"))] * 2, [b"\0" * 48] * 2),
        "empty.bin": b"",
        "garbage.bin": b"\xff\xff\xff\xff",
    }
    for name, data in seeds.items():
        (out / name).write_bytes(data)


def http_codec_seeds(out: Path) -> None:
    """'<Content-Encoding>\\n<body>' for fuzz_http_codec.cpp: each coding, lists of them, broken and unbounded
    streams (a bomb that inflates past the target's 1 MiB bound)."""
    import gzip
    import zlib

    import brotli

    text = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6]}]})
    raw = text.encode()
    deflater = zlib.compressobj(wbits=-15)
    raw_deflate = deflater.compress(raw) + deflater.flush()
    seeds = {
        "gzip.bin": (b"gzip", gzip.compress(raw, mtime=0)),
        "x-gzip.bin": (b"x-gzip", gzip.compress(raw, mtime=0)),
        "deflate-zlib.bin": (b"deflate", zlib.compress(raw)),
        "deflate-raw.bin": (b"deflate", raw_deflate),
        "br.bin": (b"br", brotli.compress(raw)),
        "identity.bin": (b"identity", raw),
        "no-coding.bin": (b"", raw),
        "list.bin": (b"gzip, br", brotli.compress(gzip.compress(raw, mtime=0))),
        "accept-q.bin": (b"gzip;q=0, deflate", zlib.compress(raw)),
        "unknown.bin": (b"compress", raw),
        "truncated-gzip.bin": (b"gzip", gzip.compress(raw, mtime=0)[:-9]),
        "trailing-garbage.bin": (b"gzip", gzip.compress(raw, mtime=0) + b"junk"),
        "truncated-br.bin": (b"br", brotli.compress(raw)[:-3]),
        "gzip-bomb.bin": (b"gzip", gzip.compress(b"\0" * (2 << 20), mtime=0)),
        "br-bomb.bin": (b"br", brotli.compress(b"\0" * (2 << 20))),
        "garbage.bin": (b"deflate", b"\xff\xfe\xfd"),
    }
    for name, (coding, body) in seeds.items():
        (out / name).write_bytes(coding + b"\n" + body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", type=Path, help="exported packages to take spec seeds from")
    parser.add_argument("--only", help="write this target's seeds only")
    args = parser.parse_args()
    makers = (("spec", lambda d: spec_seeds(args.packages, d)), ("tensors", tensor_seeds), ("golden", golden_seeds),
              ("infer_request", infer_request_seeds), ("grpc_request", grpc_request_seeds),
              ("http_codec", http_codec_seeds))
    if args.only is None and not args.packages:
        parser.error("spec seeds need packages (or --only TARGET)")
    for target, make in makers:
        if args.only not in (None, target):
            continue
        d = HERE / "corpus" / target
        d.mkdir(parents=True, exist_ok=True)
        make(d)
        print(f"{d}: {len(list(d.iterdir()))} files")


if __name__ == "__main__":
    main()
