"""The peak resident memory of one engine of benchmarks/peers_bench.py, alone in a fresh process, as a user of that
engine would run it: ONNX Runtime and OpenVINO import numpy and the engine only (no torch), eager PyTorch and Python
AOTInductor import torch. Loads the model, runs it `--runs` times at `--threads` intra-op threads, prints

    {"engine": ..., "peak_rss_mib": ..., "before_load_mib": ...}

peak_rss_mib: the process's high-water mark (VmHWM) at the end; before_load_mib: its resident memory after the
imports, before the model was loaded (what the engine's libraries alone take)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/self/status has no {key}")


def _peer(engine: str, onnx: Path, inputs: Path, threads: int):
    import numpy as np

    feed = dict(np.load(inputs))
    if engine == "ort":
        import onnxruntime as ort

        before = _status_mib("VmRSS")
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        session = ort.InferenceSession(str(onnx), so, providers=["CPUExecutionProvider"])
        return before, lambda: session.run(None, feed)
    import openvino as ov

    before = _status_mib("VmRSS")
    compiled = ov.Core().compile_model(str(onnx), "CPU", {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1,
                                                          "INFERENCE_PRECISION_HINT": "f32",
                                                          "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    return before, lambda: request.infer(feed)


def _torch(engine: str, model_name: str, batch: int, work: Path, package: Path, threads: int):
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import peer_models

    torch.set_num_threads(threads)
    inputs = tuple(torch.load(work / "inputs.pt"))
    before = _status_mib("VmRSS")
    if engine == "aoti":
        import os

        import export_tools

        if model_name in peer_models.OURS:  # the package calls our ops: their library first, as the model's import does
            export_tools.load_ops_library(os.environ["IDENTITY_CONV_OPS_LIBRARY"])
        compiled = export_tools.load_package(package)
    else:
        compiled, _ = peer_models.ALL[model_name](batch)
        if (work / "weights.pt").exists():
            compiled.load_state_dict(torch.load(work / "weights.pt"))

    def run():
        with torch.inference_mode():
            return compiled(*inputs)
    return before, run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", required=True, choices=("ort", "openvino", "eager", "aoti"))
    p.add_argument("--work", type=Path, required=True, help="peers_bench's folder of the model and batch")
    p.add_argument("--package", type=Path, required=True, help="the package; the ONNX file is beside it")
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args()
    if args.engine in ("ort", "openvino"):
        before, run = _peer(args.engine, args.package.with_suffix(".onnx"), args.work / "inputs.npz", args.threads)
    else:
        before, run = _torch(args.engine, args.model, args.batch, args.work, args.package, args.threads)
    for _ in range(args.runs):
        run()
    print(json.dumps({"engine": args.engine, "peak_rss_mib": _status_mib("VmHWM"), "before_load_mib": before}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
