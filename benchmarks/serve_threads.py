"""pt2serve's intra-op threads per model: two models x two instances under load at once, each run on every core
(intra_op_threads = the cores, what every run took before pt2serve divided them) against each model's share
(config.json without intra_op_threads: cores / instances). Rounds interleaved, medians of requests/s and p99.

    python benchmarks/serve_threads.py --pt2serve build/.../bin/pt2serve --ops LIB --conv-package P1 \
        --classifier-package P2 --out build/bench/serve_threads

Writes serve_threads.json; docs/serving.md "Threads per model" has the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import Server, free_port  # noqa: E402
from serve_load import run_load  # noqa: E402

SHAPE = [1, 3, 64, 64]
MODELS = ("conv", "classifier")


def repository(root: Path, packages: dict, ops: Path, threads: int | None) -> Path:
    repo = root / ("all_cores" if threads else "share")
    for name, package in packages.items():
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        target = repo / name / "1" / "model.pt2"
        if not target.exists():
            os.symlink(package, target)
        config = {"instance_count": 2, "dynamic_batching": False, "ops_libraries": [str(ops)]}
        if threads:
            config["intra_op_threads"] = threads
        (repo / name / "config.json").write_text(json.dumps(config))
    return repo


def measure(pt2serve: Path, repo: Path, log: Path, clients: int, seconds: float) -> dict:
    port = free_port()
    argv = [str(pt2serve), "--model-repository", str(repo), "--http-port", str(port), "--grpc-port", "-1"]
    results = {}
    with Server(repo.name, argv, port, log, os.sched_getaffinity(0), dict(os.environ)):
        def load(model: str) -> None:
            results[model] = run_load("127.0.0.1", port, model, SHAPE, clients, seconds)
        threads = [threading.Thread(target=load, args=(m,)) for m in MODELS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pt2serve", type=Path, required=True)
    p.add_argument("--ops", type=Path, required=True)
    p.add_argument("--conv-package", type=Path, required=True)
    p.add_argument("--classifier-package", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--clients", type=int, default=4, help="per model")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    packages = {"conv": args.conv_package.resolve(), "classifier": args.classifier_package.resolve()}
    runs: dict[str, list[dict]] = {"all_cores": [], "share": []}
    with tempfile.TemporaryDirectory() as tmp:
        repos = {"all_cores": repository(Path(tmp), packages, args.ops.resolve(), cores),
                 "share": repository(Path(tmp), packages, args.ops.resolve(), None)}
        for r in range(args.rounds):
            for kind, repo in repos.items():
                result = measure(args.pt2serve, repo, args.out / f"{kind}.log", args.clients, args.seconds)
                runs[kind].append(result)
                print(f"round {r + 1} {kind:9}: " + "  ".join(
                    f"{m} {result[m]['requests_per_s']:.1f} req/s p99 {result[m]['p99_ms']} ms" for m in MODELS),
                    flush=True)
    summary = {"cores": cores, "instances": 4, "clients_per_model": args.clients, "rounds": args.rounds}
    for kind, results in runs.items():
        for m in MODELS:
            summary[f"{kind} {m} requests_per_s"] = statistics.median(x[m]["requests_per_s"] for x in results)
            summary[f"{kind} {m} p99_ms"] = statistics.median(x[m]["p99_ms"] for x in results)
    for m in MODELS:
        summary[f"{m}: share / all cores throughput"] = round(
            summary[f"share {m} requests_per_s"] / summary[f"all_cores {m} requests_per_s"], 2)
        summary[f"{m}: share / all cores p99"] = round(summary[f"share {m} p99_ms"] / summary[f"all_cores {m} p99_ms"], 2)
    (args.out / "serve_threads.json").write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
