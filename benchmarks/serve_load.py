"""Load on a running pt2serve over HTTP: C client threads, each with its own keep-alive connection, sending one
frame per request (binary tensor data extension) for S seconds.

    python benchmarks/serve_load.py --url localhost:8000 --model net --concurrency 8 --seconds 10 --shape 1,3,32,32

Prints requests/s and latency percentiles as JSON. The numbers in docs/serving.md come from it. (tritonclient.http
adds ~10 ms per request on this machine, so it is not the load generator: plain http.client is.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="localhost:8000")
    p.add_argument("--model", required=True)
    p.add_argument("--input", default="x")
    p.add_argument("--shape", default="1,3,32,32")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10)
    args = p.parse_args()
    host, port = args.url.split(":")
    shape = [int(d) for d in args.shape.split(",")]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    header = json.dumps({"inputs": [{"name": args.input, "shape": shape, "datatype": "FP32",
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    body = header + x.tobytes()
    latencies: list[list[float]] = [[] for _ in range(args.concurrency)]
    failures = [0] * args.concurrency
    end = time.perf_counter() + args.seconds

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        while time.perf_counter() < end:
            t = time.perf_counter()
            conn.request("POST", f"/v2/models/{args.model}/infer", body,
                         {"Inference-Header-Content-Length": str(len(header))})
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                failures[i] += 1
            latencies[i].append(time.perf_counter() - t)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    ms = np.array([v for lst in latencies for v in lst]) * 1000
    print(json.dumps({"model": args.model, "concurrency": args.concurrency, "requests": int(ms.size),
                      "failures": sum(failures), "requests_per_s": round(ms.size / elapsed, 1),
                      "p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
