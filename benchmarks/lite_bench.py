"""pt2rt-lite against the full runtime, side by side: one package per model (`export_package(..., lite=True)`: the
full variants and the lite ones in one file), run by the full `pt2run bench` and the lite one, at batch 1 and 1 and
2 intra-op threads, on the models of benchmarks/peer_models.py. Rounds are interleaved (full 1 thread, lite 1
thread, full 2 threads, lite 2 threads, then again); the report gives each cell's median p50 over rounds and the
ratio lite / full (> 1: lite is slower), and the peak RSS of one `pt2run run` of each model by each runtime. Both
outputs are checked against eager first (--max-rel-diff). Packages are kept in --out and reused while the model's
source, torch and export_tools are the same.

    python benchmarks/lite_bench.py --pt2run build/cpu-release/bin/pt2run \\
        --pt2run-lite build/cpu-release/bin/pt2run_lite --out build/bench/lite

make bench runs it (scripts/bench.sh); writes <out>/report.json and prints a table.
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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_models  # noqa: E402
from bench import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# ms of one batch-1 run on one core here: sizes each round at ~1 s per runtime
EST_MS = {"resnet18": 20, "mobilenet_v3_small": 2, "efficientnet_b0": 11, "bert_base": 130, "vit_tiny": 25,
          "lstm": 3, "gru_tagger": 5, "rnn_tagger": 2, "lstm_tagger": 5, "gru_tagger_512": 40}
DEFAULT_MODELS = ("resnet18", "mobilenet_v3_small", "bert_base", "vit_tiny", "gru_tagger", "lstm_tagger")


def log(msg: str) -> None:
    print(f"lite_bench: {msg}", file=sys.stderr, flush=True)


def prepare(name: str, work: Path) -> Path:
    """The model's inputs and eager output; its package (full and lite variants), exported unless kept."""
    import export_tools

    work.mkdir(parents=True, exist_ok=True)
    model, inputs = peer_models.MODELS[name](1)
    with torch.inference_mode():
        eager = model(*inputs)
    torch.save(list(inputs), work / "inputs.pt")
    torch.save(eager, work / "eager.pt")
    key = hashlib.sha256((Path(peer_models.__file__).read_bytes() + name.encode() + torch.__version__.encode() +
                          b"".join(p.read_bytes() for p in sorted(Path(export_tools.__file__).parent.glob("*.py"))))
                         ).hexdigest()[:16]
    package = work / f"{name}-lite-{key}.pt2"
    if not package.exists():
        log(f"export {name} (full and lite) -> {package}")
        for old in work.glob(f"{name}-lite-*.pt2"):
            old.unlink()
        export_tools.export_package(model, inputs, package, lite=True)
    return package


# Runs argv[1:] and prints its peak RSS (kB). A child keeps its parent's peak across fork and exec (Linux), so
# pt2run is started from this small process, not from the benchmark's (torch alone is ~700 MB).
PEAK_RSS = ("import os, sys\npid = os.fork()\nif pid == 0:\n    os.execv(sys.argv[1], sys.argv[1:])\n"
            "_, status, usage = os.wait4(pid, 0)\nprint(usage.ru_maxrss)\nsys.exit(os.waitstatus_to_exitcode(status))")


def run_once(pt2run: Path, package: Path, work: Path) -> tuple[float, int]:
    """One `pt2run run`: the output's largest difference from eager (relative to eager's largest) and the
    process's peak RSS in kB."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.pt"
        proc = subprocess.run([sys.executable, "-S", "-c", PEAK_RSS, str(pt2run), "run", str(package), "-i",
                               str(work / "inputs.pt"), "-o", str(out)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{pt2run} run {package.name} failed ({proc.returncode}): {proc.stderr.strip()}")
        rss = int(proc.stdout.split()[-1])
        actual = torch.load(out)
    actual = actual[0] if isinstance(actual, (list, tuple)) else actual
    eager = torch.load(work / "eager.pt")
    return float((actual - eager).abs().max() / (eager.abs().max() or 1.0)), rss


def bench_round(pt2run: Path, package: Path, threads: int, iters: int, warmup: int) -> float:
    out = subprocess.run([str(pt2run), "bench", str(package), "--iters", str(iters), "--warmup", str(warmup),
                          "--intra-op-threads", str(threads), "--json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["latency_ms"]["p50"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pt2run", type=Path, required=True, help="the full runtime's pt2run")
    p.add_argument("--pt2run-lite", type=Path, required=True, help="the lite runtime's pt2run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--models", default=",".join(DEFAULT_MODELS))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the runs per round (0.2: a smoke run)")
    p.add_argument("--max-rel-diff", type=float, default=1e-4)
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    runtimes = {"full": args.pt2run, "lite": args.pt2run_lite}
    report: dict = {"machine": machine(), "rounds": args.rounds, "models": {}}
    ok = True
    for name in args.models.split(","):
        work = args.out / name
        package = prepare(name, work)
        cell: dict = {"rss_kb": {}, "rel_diff": {}, "p50_ms": {}}
        for rt, exe in runtimes.items():
            diff, rss = run_once(exe, package, work)
            cell["rel_diff"][rt], cell["rss_kb"][rt] = diff, rss
            if diff > args.max_rel_diff:
                log(f"{name}: {rt}'s output is {diff:.2e} from eager (> {args.max_rel_diff})")
                ok = False
        iters = max(5, int(1000 / EST_MS.get(name, 20) * args.scale))
        samples: dict = {f"{rt}/{t}": [] for t in threads for rt in runtimes}
        for r in range(args.rounds):
            for t in threads:
                for rt, exe in runtimes.items():
                    samples[f"{rt}/{t}"].append(bench_round(exe, package, t, iters, max(2, iters // 10)))
        for key, values in samples.items():
            cell["p50_ms"][key] = statistics.median(values)
        cell["ratio"] = {str(t): cell["p50_ms"][f"lite/{t}"] / cell["p50_ms"][f"full/{t}"] for t in threads}
        report["models"][name] = cell
        log(f"{name}: " + ", ".join(f"{t} thr full {cell['p50_ms'][f'full/{t}']:.2f} ms lite "
                                    f"{cell['p50_ms'][f'lite/{t}']:.2f} ms ({cell['ratio'][str(t)]:.2f}x)"
                                    for t in threads)
            + f"; peak RSS full {cell['rss_kb']['full'] / 1024:.0f} MB lite {cell['rss_kb']['lite'] / 1024:.0f} MB")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    print(f"| model | " + " | ".join(f"full {t} thr | lite {t} thr | lite/full" for t in threads)
          + " | peak RSS full | peak RSS lite |")
    print("|---" * (1 + 3 * len(threads) + 2) + "|")
    for name, cell in report["models"].items():
        print(f"| {name} | " + " | ".join(f"{cell['p50_ms'][f'full/{t}']:.2f} ms | {cell['p50_ms'][f'lite/{t}']:.2f} ms"
                                          f" | {cell['ratio'][str(t)]:.2f}x" for t in threads)
              + f" | {cell['rss_kb']['full'] / 1024:.0f} MB | {cell['rss_kb']['lite'] / 1024:.0f} MB |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
