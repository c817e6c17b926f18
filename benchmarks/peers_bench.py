"""pt2run against the engines a user would pick instead, side by side: the package `export_package(model, inputs,
path)` makes with its defaults, run by `pt2run bench`, against Python AOTInductor (the same package), eager PyTorch,
ONNX Runtime and OpenVINO (the same model and weights exported to ONNX, f32), on ResNet-18, MobileNetV3-Small,
EfficientNet-B0, a BERT-base encoder, a ViT-Tiny/16, an LSTM acoustic model and recurrent taggers (a 2-layer
bidirectional GRU, plain RNN and LSTM over 64 tokens, the GRU over 512 too; benchmarks/peer_models.py), plus the
conv-heavy example net with our own op (pt2run, Python AOTInductor and eager only: the peers cannot run it); batch 1
and 8, 1 and 2 intra-op threads.

    python benchmarks/peers_bench.py --pt2run build/cpu-release/bin/pt2run --ops build/cpu-release/lib/libidentity_conv_ops.so \\
        --peers-python .venv-peers/bin/python --out build/bench/peers

Rounds are interleaved (every engine and thread count of a model and batch, then again) and each engine's p50 and
p99 per round are kept; the report gives the median over rounds, the ratio pt2run / the faster peer (> 1: we are
slower), pt2run / eager, the cores each engine kept busy (CPU time / wall time over the timed runs: 1 thread
asked must mean ~1 core), and each engine's peak resident memory alone in a process (peak_rss.py; pt2run's from its
bench runs). Every engine's output is checked against eager first (pt2run's by `pt2run run`); one
farther than --max-rel-diff fails the run. Packages are kept in --out and reused while their model's source and
torch are the same. Writes <out>/report.json and <out>/chart.png and prints a table. make bench and make bench-peers
run it (scripts/bench.sh).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_models  # noqa: E402
from bench import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# ms of one batch-1 run on one core here (sizes each round at ~1 s per engine; batch 8 runs 8x fewer)
EST_MS = {"resnet18": 20, "mobilenet_v3_small": 2, "efficientnet_b0": 11, "shufflenet_v2": 3, "bert_base": 130,
          "vit_tiny": 25, "lstm": 3, "gru_tagger": 5, "rnn_tagger": 2, "lstm_tagger": 5, "gru_tagger_512": 40,
          "conv_heavy_net": 2}
ENGINES = ("pt2run", "aoti", "eager", "ort", "openvino")
PEERS = ("ort", "openvino")


def log(msg: str) -> None:
    print(f"peers_bench: {msg}", file=sys.stderr, flush=True)


def prepare(name: str, batch: int, work: Path, ops: Path) -> Path:
    """The model's weights, inputs and eager output for the runners; its package, exported unless kept."""
    import export_tools

    work.mkdir(parents=True, exist_ok=True)
    model, inputs = peer_models.ALL[name](batch)
    with torch.inference_mode():
        eager = model(*inputs)
    if name in peer_models.MODELS:
        torch.save(model.state_dict(), work / "weights.pt")
    torch.save(list(inputs), work / "inputs.pt")
    np.savez(work / "inputs.npz", **{f"input{i}": t.numpy() for i, t in enumerate(inputs)})  # peak_rss.py's peers
    torch.save(eager, work / "eager.pt")
    key = hashlib.sha256((Path(peer_models.__file__).read_bytes() + f"{name}/{batch}".encode() +
                          torch.__version__.encode() + b"".join(
                              p.read_bytes() for p in sorted(Path(export_tools.__file__).parent.glob("*.py"))))
                         ).hexdigest()[:16]
    package = work / f"{name}-{key}.pt2"
    if not package.exists():
        log(f"export {name} batch {batch} -> {package}")
        for old in (*work.glob(f"{name}-*.pt2"), *work.glob(f"{name}*.onnx")):
            old.unlink()
        export_tools.export_package(model, inputs, package, ops_libraries=[ops] if name in peer_models.OURS else ())
    return package


def pt2run_rel_diff(pt2run: Path, ops: Path, package: Path, work: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.pt"
        subprocess.run([str(pt2run), "run", str(package), "--ops", str(ops), "-i", str(work / "inputs.pt"),
                        "-o", str(out)], check=True, capture_output=True)
        actual = torch.load(out)
    actual = actual[0] if isinstance(actual, (list, tuple)) else actual
    eager = torch.load(work / "eager.pt")
    return float((actual - eager).abs().max() / (eager.abs().max() or 1.0))


def pt2run_round(pt2run: Path, ops: Path, package: Path, threads: int, iters: int, warmup: int) -> dict:
    out = subprocess.run([str(pt2run), "bench", str(package), "--ops", str(ops), "--iters", str(iters), "--warmup",
                          str(warmup), "--intra-op-threads", str(threads), "--json"],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return {"p50_ms": j["latency_ms"]["p50"], "p99_ms": j["latency_ms"]["p99"], "cores_busy": j["cores_busy"],
            "peak_rss_mib": j["peak_rss_mib"]}


def peak_rss(args, engine: str, name: str, batch: int, work: Path, package: Path, threads: int,
             pt2run_samples: list[dict]) -> float:
    """The engine's peak resident memory (MiB) alone in a process, as its user would run it (peak_rss.py); pt2run's
    from its bench runs."""
    if engine == "pt2run":
        return max(s["peak_rss_mib"] for s in pt2run_samples)
    python = args.peers_python if engine in PEERS else Path(sys.executable)
    env = dict(os.environ, IDENTITY_CONV_OPS_LIBRARY=str(args.ops))
    out = subprocess.run([str(python), str(ROOT / "benchmarks" / "peak_rss.py"), "--engine", engine, "--work",
                          str(work), "--package", str(package), "--model", name, "--batch", str(batch), "--threads",
                          str(threads)], check=True, capture_output=True, text=True, env=env, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_rss_mib"]


class Runner:
    """A peers_runner process for one model and batch: ready when it has checked each of its engines against eager."""

    def __init__(self, python: Path, name: str, batch: int, work: Path, threads: list[int], engines: tuple[str, ...],
                 package: Path, ops: Path):
        env = dict(os.environ, IDENTITY_CONV_OPS_LIBRARY=str(ops))
        self.proc = subprocess.Popen([str(python), str(ROOT / "benchmarks" / "peers_runner.py"), "--model", name,
                                      "--batch", str(batch), "--work", str(work), "--threads",
                                      ",".join(map(str, threads)), "--engines", ",".join(engines),
                                      "--package", str(package)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
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
        return {"p50_ms": j["p50_ms"], "p99_ms": j["p99_ms"], "cores_busy": j["cpu_s"] / j["wall_s"]}

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def bench_cell(args, name: str, batch: int, threads: list[int], report: dict) -> bool:
    """One model at one batch size: every engine at every thread count, interleaved; True if all were accurate."""
    work = args.out / name / f"b{batch}"
    package = prepare(name, batch, work, args.ops)
    ours_only = name in peer_models.OURS
    runners = {"torch": Runner(Path(sys.executable), name, batch, work, threads, ("eager", "aoti"), package,
                               args.ops)}
    if not ours_only:
        runners["peers"] = Runner(args.peers_python, name, batch, work, threads, PEERS, package, args.ops)
        report["versions"].update(runners["peers"].ready["versions"])
    accuracy = {"pt2run": pt2run_rel_diff(args.pt2run, args.ops, package, work)}
    for r in runners.values():
        for key, diff in r.ready["max_rel_diff_vs_eager"].items():
            engine = key.split("/")[0]
            accuracy[engine] = max(accuracy.get(engine, 0.0), diff)
    bad = {e: d for e, d in accuracy.items() if d > args.max_rel_diff}
    if bad:
        log(f"{name} batch {batch}: differs from eager by more than {args.max_rel_diff}: {bad}")
    engines = [e for e in ENGINES if not (ours_only and e in PEERS)]
    iters = max(5, min(400, int(1000 * args.scale / (EST_MS[name] * batch))))
    warmup = max(2, iters // 10)
    samples: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        for t in threads:
            for engine in engines:
                if engine == "pt2run":
                    s = pt2run_round(args.pt2run, args.ops, package, t, iters, warmup)
                else:
                    s = runners["peers" if engine in PEERS else "torch"].round(engine, t, iters, warmup)
                samples.setdefault(f"{engine}/{t}", []).append(s)
        log(f"{name} batch {batch}: round {r + 1}/{args.rounds}")
    for r in runners.values():
        r.close()
    result = {"package": str(package), "iters": iters, "max_rel_diff_vs_eager": accuracy,
              "peak_rss_mib": {e: peak_rss(args, e, name, batch, work, package, max(threads),
                                           samples[f"pt2run/{max(threads)}"]) for e in engines}}
    for t in threads:
        row = {e: {k: statistics.median(s[k] for s in samples[f"{e}/{t}"]) for k in ("p50_ms", "p99_ms", "cores_busy")}
               for e in engines}
        if not ours_only:
            row["ratio_vs_faster_peer"] = row["pt2run"]["p50_ms"] / min(row[e]["p50_ms"] for e in PEERS)
        row["ratio_vs_eager"] = row["pt2run"]["p50_ms"] / row["eager"]["p50_ms"]
        result[f"threads_{t}"] = row
    report["models"].setdefault(name, {})[f"batch_{batch}"] = result
    return not bad


def chart(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = list(report["models"])
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows + 0.6), squeeze=False)
    colours = {"pt2run": "tab:red", "aoti": "tab:orange", "eager": "tab:grey", "ort": "tab:blue",
               "openvino": "tab:purple"}
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    for ax, name in zip(axes.flat, names):
        cells = [(b, t) for b, res in report["models"][name].items() for t in report["threads"]
                 if f"threads_{t}" in res]
        width = 0.8 / len(ENGINES)
        for i, engine in enumerate(ENGINES):
            xs, ys = [], []
            for x, (b, t) in enumerate(cells):
                row = report["models"][name][b][f"threads_{t}"]
                base = min((row[e]["p50_ms"] for e in PEERS if e in row), default=row["eager"]["p50_ms"])
                if engine in row:
                    xs.append(x - 0.4 + (i + 0.5) * width)
                    ys.append(row[engine]["p50_ms"] / base)
            ax.bar(xs, ys, width=width, color=colours[engine])
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(cells)), [f"b{b.split('_')[1]}\n{t} thr" for b, t in cells], fontsize=8)
        ax.set_title(name, fontsize=9)
    for row in axes:
        row[0].set_ylabel("p50 / faster peer's p50\n(conv_heavy_net: / eager); lower is faster", fontsize=8)
    fig.legend(handles=[Patch(color=c, label=e) for e, c in colours.items()], loc="upper right", ncols=5, fontsize=8)
    m = report["machine"]
    fig.suptitle(f"{m['cpu']}, {m['cores']} cores, torch {report['torch']}", fontsize=9, x=0.3)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    fig.savefig(path, dpi=100)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pt2run", type=Path, required=True)
    p.add_argument("--ops", type=Path, required=True, help="the ops library (conv_heavy_net uses it; the others none)")
    p.add_argument("--peers-python", type=Path, required=True, help="a Python with onnxruntime, openvino and torch")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--models", default=",".join(peer_models.TABLE))
    p.add_argument("--batches", default="1,8")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the runs per round (0.2: a smoke run)")
    p.add_argument("--max-rel-diff", type=float, default=1e-4,
                   help="an engine whose output differs from eager by more (relative to its max |value|) fails the run")
    args = p.parse_args()
    args.ops = args.ops.resolve()
    threads = [int(t) for t in args.threads.split(",")]
    report = {"machine": machine(), "torch": torch.__version__, "rounds": args.rounds, "threads": threads,
              "versions": {}, "models": {}}
    ok = True
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            ok &= bench_cell(args, name, batch, threads, report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    chart(report, args.out / "chart.png")
    m, v = report["machine"], report["versions"]
    print(f"{m['cpu']} ({m['isa']}), {m['cores']} cores; torch {report['torch']}, onnxruntime "
          f"{v.get('onnxruntime', '-')}, openvino {v.get('openvino', '-')}; p50 / p99 ms, median of {args.rounds} "
          f"interleaved rounds (cores busy); chart: {args.out / 'chart.png'}")
    print(f"{'model':<19}{'b':>2}{'thr':>4}" + "".join(f"{e:>24}" for e in ENGINES) + f"{'/peer':>7}{'/eager':>7}")
    for name, by_batch in report["models"].items():
        for b, res in by_batch.items():
            for t in threads:
                row = res[f"threads_{t}"]
                cells = "".join(f"{row[e]['p50_ms']:9.2f}/{row[e]['p99_ms']:8.2f} ({row[e]['cores_busy']:.1f})"
                                if e in row else f"{'-':>24}" for e in ENGINES)
                peer = f"{row['ratio_vs_faster_peer']:7.2f}" if "ratio_vs_faster_peer" in row else f"{'-':>7}"
                print(f"{name:<19}{b.split('_')[1]:>2}{t:>4}{cells}{peer}{row['ratio_vs_eager']:7.2f}")
    print(f"peak resident memory (MiB), each engine alone in a process at {max(threads)} threads (ORT and OpenVINO "
          f"without torch):")
    print(f"{'model':<19}{'b':>2}" + "".join(f"{e:>10}" for e in ENGINES))
    for name, by_batch in report["models"].items():
        for b, res in by_batch.items():
            rss = res["peak_rss_mib"]
            print(f"{name:<19}{b.split('_')[1]:>2}" + "".join(f"{rss[e]:10.0f}" if e in rss else f"{'-':>10}"
                                                            for e in ENGINES))
    print("max |engine - eager| / max |eager|: " + "; ".join(
        f"{name} b{b.split('_')[1]}: " + ", ".join(f"{e} {d:.0e}" for e, d in res["max_rel_diff_vs_eager"].items())
        for name, by_batch in report["models"].items() for b, res in by_batch.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
