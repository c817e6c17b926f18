"""pt2serve on the package's device, checked over both transports against the eager model there (scripts/gpu-check.sh).
Needs no package index: HTTP through the standard library, gRPC through grpcio + protobuf and the Open Inference
Protocol's generated modules (service_pb2*.py), which scripts/gpu-deps.sh carries along (--py DIR).

  gpu_serve_check.py --pt2serve BIN --package PKG --ops LIB --device cuda [--py DIR] [--requests N]

Prints one line per transport (requests, max error, p50 latency) and exits 1 when an answer differs from eager."""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch

from my_ops import models

MODEL = "identity_conv_net"


def wait_for(ready, what: str, seconds: float = 60):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            value = ready()
            if value:
                return value
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.1)
    sys.exit(f"gpu-serve-check: {what} not ready within {seconds:.0f} s")


def http_json(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def http_infer(base: str, x: torch.Tensor) -> torch.Tensor:
    answer = http_json(f"{base}/v2/models/{MODEL}/infer", {"inputs": [{
        "name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.flatten().tolist()}]})
    out = answer["outputs"][0]
    return torch.tensor(out["data"], dtype=torch.float32).reshape(out["shape"])


def grpc_infer(stub, pb2, x: torch.Tensor) -> torch.Tensor:
    request = pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    request.raw_input_contents.append(_raw_bytes(x))
    response = stub.ModelInfer(request, timeout=60)
    out = response.outputs[0]
    raw = bytearray(response.raw_output_contents[0])
    return torch.frombuffer(raw, dtype=torch.float32).reshape(list(out.shape)).clone()


def _raw_bytes(x: torch.Tensor) -> bytes:
    # without numpy, which the GPU machine may lack: the tensor's bytes through its storage
    return bytes(x.clone(memory_format=torch.contiguous_format).untyped_storage())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pt2serve", required=True)
    p.add_argument("--package", required=True)
    p.add_argument("--ops", required=True, help="the ops library pt2serve loads (its folder goes on PT2RT_OPS_PATH)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--py", help="folder with grpc, google.protobuf and service_pb2*.py (gRPC is skipped without)")
    p.add_argument("--requests", type=int, default=50)
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpu-serve-check-"))
    (work / "repo" / MODEL / "1").mkdir(parents=True)
    shutil.copyfile(args.package, work / "repo" / MODEL / "1" / "model.pt2")
    log = work / "pt2serve.log"
    env = {**os.environ, "PT2RT_OPS_PATH": str(Path(args.ops).resolve().parent)}
    server = subprocess.Popen([args.pt2serve, "--model-repository", str(work / "repo"), "--http-port", "0",
                               "--grpc-port", "0"], stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
    failed = False
    try:
        def listening():
            if server.poll() is not None:
                sys.exit(f"gpu-serve-check: pt2serve exited with {server.returncode}:\n{log.read_text()[-2000:]}")
            lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
            return next((line for line in lines if line.get("msg") == "listening"), None)
        ports = wait_for(listening, "pt2serve (its 'listening' line)")
        base = f"http://127.0.0.1:{ports['http_port']}"
        wait_for(lambda: urllib.request.urlopen(f"{base}/v2/models/{MODEL}/ready", timeout=5).status == 200,
                 f"{MODEL} over HTTP")

        model, _ = models.identity_conv_net()
        model = model.eval().to(args.device)
        transports = [("HTTP", lambda x: http_infer(base, x))]
        if args.py:
            import types

            sys.path.insert(0, args.py)
            # the protocol's modules as tritonclient ships them (they import each other as tritonclient.grpc.*),
            # without the rest of tritonclient: a package of that name over --py
            for name, path in (("tritonclient", []), ("tritonclient.grpc", [args.py])):
                sys.modules[name] = types.ModuleType(name)
                sys.modules[name].__path__ = path
            import grpc
            from tritonclient.grpc import service_pb2, service_pb2_grpc
            channel = grpc.insecure_channel(f"127.0.0.1:{ports['grpc_port']}")
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            transports.append(("gRPC", lambda x: grpc_infer(stub, service_pb2, x)))
        else:
            print("gpu-serve-check: gRPC SKIPPED (no --py folder with grpc and the protocol's modules)")
        gen = torch.Generator().manual_seed(0)
        for name, infer in transports:
            worst, times = 0.0, []
            for i in range(args.requests):
                x = torch.randn(1 + i % 4, 3, 32, 32, generator=gen)
                start = time.perf_counter()
                y = infer(x)
                times.append(time.perf_counter() - start)
                with torch.no_grad():
                    expected = model(x.to(args.device)).cpu()
                worst = max(worst, (y - expected).abs().max().item())
                if not torch.allclose(y, expected, rtol=1.3e-6, atol=1e-5):
                    print(f"gpu-serve-check: {name} request {i} differs from eager on {args.device}: max error "
                          f"{(y - expected).abs().max().item():.3g}")
                    failed = True
                    break
            print(f"gpu-serve-check: pt2serve over {name} on {args.device}: {len(times)} requests, max error vs eager "
                  f"{worst:.3g}, p50 {statistics.median(times) * 1e3:.2f} ms {'FAILED' if failed else 'PASSED'}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
