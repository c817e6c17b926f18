"""pt2run against ONNX Runtime and OpenVINO on real models (ResNet-18, MobileNetV3-Small, a BERT-base encoder):
the package `export_package(model, inputs, path)` makes with its defaults, run by `pt2run bench`, against the same
model (same weights) exported to ONNX and run by each peer, batch 1, fp32, at 1 and 2 intra-op threads.

    python benchmarks/peers_bench.py --pt2run build/cpu-release/bin/pt2run --ops build/cpu-release/lib/libidentity_conv_ops.so \
        --peers-python .venv-peers/bin/python --out build/bench/peers

Rounds are interleaved (pt2run, ORT, OpenVINO, then again) and each engine's p50 per round is kept; the report
gives the median over rounds, the ratio pt2run / the faster peer (> 1: we are slower) and the cores each engine kept
busy (CPU time / wall time over the timed runs: 1 thread asked must mean ~1 core). Every peer's output is checked
against eager first. Packages are kept in --out and reused while their model's source and torch are the same.
Writes <out>/report.json and prints a table. make bench-peers runs it (scripts/bench.sh peers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_models  # noqa: E402
from bench import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# per-model timed runs per round (and warm-up runs), sized for ~1-3 s per engine and round on one core
ITERS = {"resnet18": (60, 10), "mobilenet_v3_small": (300, 30), "bert_base": (10, 3)}


def log(msg: str) -> None:
    print(f"peers_bench: {msg}", file=sys.stderr, flush=True)


def prepare(name: str, work: Path) -> Path:
    """The model's weights, inputs and eager output for the peers; its package, exported unless kept."""
    import export_tools

    work.mkdir(parents=True, exist_ok=True)
    model, inputs = peer_models.MODELS[name]()
    with torch.inference_mode():
        eager = model(*inputs)
    torch.save(model.state_dict(), work / "weights.pt")
    torch.save(list(inputs), work / "inputs.pt")
    torch.save(eager, work / "eager.pt")
    key = hashlib.sha256((Path(peer_models.__file__).read_bytes() + name.encode() + torch.__version__.encode() +
                          Path(export_tools.__file__).parent.joinpath("export.py").read_bytes())).hexdigest()[:16]
    package = work / f"{name}-{key}.pt2"
    if not package.exists():
        log(f"export {name} -> {package}")
        for old in work.glob(f"{name}-*.pt2"):
            old.unlink()
        export_tools.export_package(model, inputs, package)
    return package


def pt2run_round(pt2run: Path, ops: Path, package: Path, threads: int, iters: int, warmup: int) -> dict:
    out = subprocess.run([str(pt2run), "bench", str(package), "--ops", str(ops), "--iters", str(iters), "--warmup",
                          str(warmup), "--intra-op-threads", str(threads), "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return {"p50_ms": j["latency_ms"]["p50"], "cores_busy": j["cores_busy"]}


class Peers:
    """The peers_runner process of one model: ready when it has checked every engine against eager."""

    def __init__(self, python: Path, name: str, work: Path, threads: list[int]):
        self.proc = subprocess.Popen([str(python), str(ROOT / "benchmarks" / "peers_runner.py"), "--model", name,
                                      "--work", str(work), "--threads", ",".join(map(str, threads))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        while line and not line.startswith("{"):  # a library's own message on stdout
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peers_runner for {name} exited ({self.proc.wait()}); its error is above")
        self.ready = json.loads(line)

    def round(self, engine: str, threads: int, iters: int, warmup: int) -> dict:
        self.proc.stdin.write(json.dumps({"engine": engine, "threads": threads, "iters": iters,
                                          "warmup": warmup}) + "\n")
        self.proc.stdin.flush()
        j = json.loads(self.proc.stdout.readline())
        return {"p50_ms": j["p50_ms"], "cores_busy": j["cpu_s"] / j["wall_s"]}

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pt2run", type=Path, required=True)
    p.add_argument("--ops", type=Path, required=True, help="an ops library for pt2run (the packages use none)")
    p.add_argument("--peers-python", type=Path, required=True, help="a Python with onnxruntime, openvino and torch")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--models", default=",".join(peer_models.MODELS))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the runs per round (0.2: a smoke run)")
    p.add_argument("--max-rel-diff", type=float, default=1e-4,
                   help="a peer whose output differs from eager by more (relative to its max |value|) fails the run")
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    engines = ["pt2run", "ort", "openvino"]
    report = {"machine": machine(), "torch": torch.__version__, "rounds": args.rounds, "models": {}}
    failed = False
    for name in args.models.split(","):
        work = args.out / name
        package = prepare(name, work)
        peers = Peers(args.peers_python, name, work, threads)
        report["peers"] = peers.ready["versions"]
        bad = {k: v for k, v in peers.ready["max_rel_diff_vs_eager"].items() if v > args.max_rel_diff}
        if bad:
            log(f"{name}: peers differ from eager: {bad}")
            failed = True
        iters, warmup = (max(3, int(n * args.scale)) for n in ITERS[name])
        samples: dict[str, list[dict]] = {}
        for r in range(args.rounds):
            for t in threads:
                for engine in engines:
                    s = (pt2run_round(args.pt2run, args.ops, package, t, iters, warmup) if engine == "pt2run"
                         else peers.round(engine, t, iters, warmup))
                    samples.setdefault(f"{engine}/{t}", []).append(s)
            log(f"{name}: round {r + 1}/{args.rounds}")
        peers.close()
        result = {"package": str(package), "max_rel_diff_vs_eager": peers.ready["max_rel_diff_vs_eager"]}
        for t in threads:
            row = {e: {"p50_ms": statistics.median(s["p50_ms"] for s in samples[f"{e}/{t}"]),
                       "cores_busy": statistics.median(s["cores_busy"] for s in samples[f"{e}/{t}"])}
                   for e in engines}
            row["ratio_vs_faster_peer"] = row["pt2run"]["p50_ms"] / min(row["ort"]["p50_ms"], row["openvino"]["p50_ms"])
            result[f"threads_{t}"] = row
        report["models"][name] = result
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    m = report["machine"]
    print(f"{m['cpu']} ({m['isa']}), {m['cores']} cores; torch {report['torch']}, "
          f"onnxruntime {report['peers']['onnxruntime']}, openvino {report['peers']['openvino']}; "
          f"p50 ms, median of {args.rounds} interleaved rounds (cores busy)")
    print(f"{'model':<20} {'threads':>7} {'pt2run':>16} {'ORT':>16} {'OpenVINO':>16} {'ratio':>6}")
    for name, result in report["models"].items():
        for t in threads:
            row = result[f"threads_{t}"]
            cells = [f"{row[e]['p50_ms']:8.2f} ({row[e]['cores_busy']:.1f})" for e in engines]
            print(f"{name:<20} {t:>7} {cells[0]:>16} {cells[1]:>16} {cells[2]:>16} {row['ratio_vs_faster_peer']:6.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
