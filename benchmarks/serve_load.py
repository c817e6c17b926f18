"""Load on a running Open Inference Protocol server over HTTP: client threads, each with its own keep-alive
connection, sending one frame per request (binary tensor data extension) for S seconds.

    python benchmarks/serve_load.py --url localhost:8000 --model net --concurrency 8 --seconds 10 --shape 1,3,32,32

Prints requests/s and latency percentiles as JSON. benchmarks/serve_bench.py drives pt2serve and the KServe baseline
with it. (tritonclient.http adds ~10 ms per request on this machine, so it is not the load generator: plain
http.client is.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time

import numpy as np


def run_load(host: str, port: int, model: str, shape: list[int], concurrency: int, seconds: float,
             input_name: str = "x", warmup: float = 0.5) -> dict:
    """Requests/s, p50/p99 (ms) and failures of `concurrency` clients sending for `seconds` after `warmup`."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    header = json.dumps({"inputs": [{"name": input_name, "shape": shape, "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    body = header + x.tobytes()
    headers = {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"}
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    failures = [0] * concurrency
    errors: list[str] = []
    begin = time.perf_counter() + warmup
    end = begin + seconds

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        while (t := time.perf_counter()) < end:
            try:
                conn.request("POST", f"/v2/models/{model}/infer", body, headers)
                r = conn.getresponse()
                payload = r.read()
                ok = r.status == 200
            except (OSError, http.client.HTTPException) as e:
                payload, ok = str(e).encode(), False
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=120)
            if t < begin:
                continue
            if not ok:
                failures[i] += 1
                if len(errors) < 3:
                    errors.append(payload[:200].decode(errors="replace"))
            latencies[i].append(time.perf_counter() - t)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ms = np.array([v for lst in latencies for v in lst]) * 1000
    result = {"model": model, "concurrency": concurrency, "requests": int(ms.size), "failures": sum(failures),
              "requests_per_s": round(ms.size / seconds, 1),
              "p50_ms": round(float(np.percentile(ms, 50)), 3) if ms.size else None,
              "p99_ms": round(float(np.percentile(ms, 99)), 3) if ms.size else None}
    if errors:
        result["errors"] = errors
    return result


class SlowClients:
    """`n` connections that each send a request's first bytes, then one more byte per second: a third never finish
    their headers, a third their bodies, a third send nothing (the slowloris attack). A context manager."""

    def __init__(self, host: str, port: int, n: int = 1000):
        import resource
        import socket
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, n + 256), hard), hard))
        self.sockets = []
        for i in range(n):
            s = socket.create_connection((host, port), timeout=10)
            if i % 3 == 0:
                s.sendall(b"POST /v2/models/x/infer HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            elif i % 3 == 1:
                s.sendall(b"POST /v2/models/x/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
            self.sockets.append((s, i % 3 != 2))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip)
        self._thread.start()

    def _drip(self) -> None:
        while not self._stop.wait(1.0):
            for s, sends in self.sockets:
                if sends:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass

    def __enter__(self) -> "SlowClients":
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for s, _ in self.sockets:
            s.close()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="localhost:8000")
    p.add_argument("--model", required=True)
    p.add_argument("--input", default="x")
    p.add_argument("--shape", default="1,3,32,32")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10)
    args = p.parse_args()
    host, port = args.url.rsplit(":", 1)
    result = run_load(host, int(port), args.model, [int(d) for d in args.shape.split(",")], args.concurrency,
                      args.seconds, args.input)
    print(json.dumps(result))
    return 0 if result["failures"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
