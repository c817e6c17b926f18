"""The peers' side of benchmarks/peers_bench.py, run in the bench-only venv (.venv-peers: onnxruntime, openvino,
torch): builds one model of peer_models.py with the weights the bench saved, exports it to ONNX, opens an ONNX
Runtime session and an OpenVINO compiled model per thread count, checks each against the eager output, then answers
timing requests on stdin, one JSON object per line in and out:

    {"engine": "ort" | "openvino", "threads": N, "iters": N, "warmup": N}
    -> {"p50_ms": ..., "mean_ms": ..., "wall_s": ..., "cpu_s": ...}

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


def cpu_seconds() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def export_onnx(model: torch.nn.Module, inputs: tuple, path: Path) -> None:
    # the TorchScript exporter: one graph of plain ONNX ops, what ORT's and OpenVINO's own guides start from
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # eval-mode Transformer layers take torch's fused fast path, which has no ONNX form; the plain ops do
        torch.backends.mha.set_fastpath_enabled(False)
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17,
                          input_names=[f"input{i}" for i in range(len(inputs))])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=sorted(peer_models.MODELS))
    p.add_argument("--work", type=Path, required=True, help="the bench's folder: weights.pt, inputs.pt, eager.pt")
    p.add_argument("--threads", required=True, help="comma-separated intra-op thread counts")
    args = p.parse_args()
    import onnxruntime as ort
    import openvino as ov

    torch.set_num_threads(1)
    model, _ = peer_models.MODELS[args.model]()
    model.load_state_dict(torch.load(args.work / "weights.pt"))
    inputs = tuple(torch.load(args.work / "inputs.pt"))
    eager = torch.load(args.work / "eager.pt").numpy()
    onnx_path = args.work / f"{args.model}.onnx"
    export_onnx(model, inputs, onnx_path)
    feed = {f"input{i}": t.numpy() for i, t in enumerate(inputs)}

    runners: dict[tuple[str, int], object] = {}
    core = ov.Core()
    ov_model = core.read_model(str(onnx_path))
    for n in (int(t) for t in args.threads.split(",")):
        so = ort.SessionOptions()
        so.intra_op_num_threads = n
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        session = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
        runners[("ort", n)] = lambda s=session: s.run(None, feed)[0]
        # f32 as the other engines (OpenVINO runs bf16 by default where the CPU has it), one stream, latency
        compiled = core.compile_model(ov_model, "CPU", {"INFERENCE_NUM_THREADS": n, "NUM_STREAMS": 1,
                                                        "INFERENCE_PRECISION_HINT": "f32",
                                                        "PERFORMANCE_HINT": "LATENCY"})
        request = compiled.create_infer_request()
        runners[("openvino", n)] = lambda r=request: next(iter(r.infer(feed).values()))
    scale = float(np.abs(eager).max()) or 1.0
    check = {f"{engine}/{n}": float(np.abs(np.asarray(fn()) - eager).max() / scale)
             for (engine, n), fn in runners.items()}
    print(json.dumps({"ready": True, "onnx": str(onnx_path), "versions": {"onnxruntime": ort.__version__,
                                                                          "openvino": ov.__version__},
                      "max_rel_diff_vs_eager": check}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        fn = runners[(cmd["engine"], int(cmd["threads"]))]
        for _ in range(int(cmd["warmup"])):
            fn()
        lat = []
        c0, w0 = cpu_seconds(), time.perf_counter()
        for _ in range(int(cmd["iters"])):
            t0 = time.perf_counter()
            fn()
            lat.append((time.perf_counter() - t0) * 1e3)
        wall, cpu = time.perf_counter() - w0, cpu_seconds() - c0
        print(json.dumps({"p50_ms": statistics.median(lat), "mean_ms": statistics.fmean(lat), "wall_s": wall,
                          "cpu_s": cpu}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
