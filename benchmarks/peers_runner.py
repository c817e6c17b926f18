"""The engines of benchmarks/peers_bench.py other than pt2run, one model and batch per process: ONNX Runtime and
OpenVINO (in the bench-only venv .venv-peers, on the model exported to ONNX), or eager PyTorch and Python
AOTInductor (in the project's venv, on the package pt2run runs). It builds the model of peer_models.py with the
weights the bench saved, makes a runner per engine and thread count, checks each against the eager output, then
answers timing requests on stdin, one JSON object per line in and out:

    {"engine": "ort" | "openvino" | "eager" | "aoti", "threads": N, "iters": N, "warmup": N}
    -> {"p50_ms": ..., "p99_ms": ..., "mean_ms": ..., "wall_s": ..., "cpu_s": ...}

cpu_s is the process's CPU time (all threads) over the timed runs: cpu_s / wall_s is the cores an engine kept busy.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_models  # noqa: E402

TORCH_ENGINES = ("eager", "aoti")


def cpu_seconds() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def export_onnx(model: torch.nn.Module, inputs: tuple, path: Path) -> None:
    # the TorchScript exporter: one graph of plain ONNX ops, what ORT's and OpenVINO's own guides start from
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # eval-mode Transformer layers take torch's fused fast path, which has no ONNX form; the plain ops do
        torch.backends.mha.set_fastpath_enabled(False)
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17,
                          input_names=[f"input{i}" for i in range(len(inputs))])
        torch.backends.mha.set_fastpath_enabled(True)


def peer_runners(model: torch.nn.Module, inputs: tuple, engines: list[str], threads: list[int], onnx_path: Path):
    import onnxruntime as ort
    import openvino as ov

    if not onnx_path.exists():  # named after the package's key: a changed model or torch makes a new one
        partial = onnx_path.with_suffix(".partial")
        export_onnx(model, inputs, partial)
        partial.rename(onnx_path)
    feed = {f"input{i}": t.numpy() for i, t in enumerate(inputs)}
    runners = {}
    core = ov.Core()
    ov_model = core.read_model(str(onnx_path))
    for n in threads:
        if "ort" in engines:
            so = ort.SessionOptions()
            so.intra_op_num_threads = n
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            session = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
            runners[("ort", n)] = lambda s=session: s.run(None, feed)[0]
        if "openvino" in engines:
            # f32 as the other engines (OpenVINO runs bf16 by default where the CPU has it), one stream, latency
            compiled = core.compile_model(ov_model, "CPU", {"INFERENCE_NUM_THREADS": n, "NUM_STREAMS": 1,
                                                            "INFERENCE_PRECISION_HINT": "f32",
                                                            "PERFORMANCE_HINT": "LATENCY"})
            request = compiled.create_infer_request()
            runners[("openvino", n)] = lambda r=request: next(iter(r.infer(feed).values()))
    return runners, {"onnxruntime": ort.__version__, "openvino": ov.__version__}


def torch_runners(model: torch.nn.Module, inputs: tuple, engines: list[str], threads: list[int], package: Path | None):
    def eager():
        with torch.inference_mode():
            return model(*inputs)

    runners = {}
    if "aoti" in engines:
        import export_tools

        compiled = export_tools.load_package(package)

        def aoti():
            with torch.inference_mode():
                return compiled(*inputs)
    for n in threads:
        if "eager" in engines:
            runners[("eager", n)] = eager
        if "aoti" in engines:
            runners[("aoti", n)] = aoti
    return runners, {"torch": torch.__version__}


def as_numpy(out) -> np.ndarray:
    if isinstance(out, (list, tuple)):
        out = out[0]
    return out.numpy() if isinstance(out, torch.Tensor) else np.asarray(out)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=sorted(peer_models.ALL))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--work", type=Path, required=True, help="the bench's folder: weights.pt, inputs.pt, eager.pt")
    p.add_argument("--threads", required=True, help="comma-separated intra-op thread counts")
    p.add_argument("--engines", default="ort,openvino", help="ort,openvino or eager,aoti (not both in one process)")
    p.add_argument("--package", type=Path, required=True,
                   help="the package (aoti); the peers' ONNX file is kept beside it, with its name")
    args = p.parse_args()
    engines = args.engines.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    torch.set_num_threads(1)
    model, _ = peer_models.ALL[args.model](args.batch)
    if (args.work / "weights.pt").exists():
        model.load_state_dict(torch.load(args.work / "weights.pt"))
    inputs = tuple(torch.load(args.work / "inputs.pt"))
    eager = torch.load(args.work / "eager.pt").numpy()
    if set(engines) <= set(TORCH_ENGINES):
        runners, versions = torch_runners(model, inputs, engines, threads, args.package)
    else:
        runners, versions = peer_runners(model, inputs, engines, threads, args.package.with_suffix(".onnx"))
    scale = float(np.abs(eager).max()) or 1.0
    check = {f"{engine}/{n}": float(np.abs(as_numpy(fn()) - eager).max() / scale)
             for (engine, n), fn in runners.items()}
    print(json.dumps({"ready": True, "versions": versions, "max_rel_diff_vs_eager": check}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        n = int(cmd["threads"])
        fn = runners[(cmd["engine"], n)]
        if cmd["engine"] in TORCH_ENGINES:
            torch.set_num_threads(n)
        for _ in range(int(cmd["warmup"])):
            fn()
        lat = []
        c0, w0 = cpu_seconds(), time.perf_counter()
        for _ in range(int(cmd["iters"])):
            t0 = time.perf_counter()
            fn()
            lat.append((time.perf_counter() - t0) * 1e3)
        wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
        print(json.dumps({"p50_ms": statistics.median(lat), "p99_ms": percentile(lat, 99),
                          "mean_ms": statistics.fmean(lat), "wall_s": wall, "cpu_s": cpu}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
