"""make bench: every performance measurement, side by side with its baseline in the same run.

    python benchmarks/bench.py --build build/cpu-release --package build/models/identity_conv_net.pt2 --out build/bench

Writes <out>/report.json (raw numbers, ratios, goals), <out>/chart.png, and prints a table of ratios. Ratios are
"higher is better" versions of ours vs the baseline; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict:
    """This machine as the reports state it: CPU model, the ISA flags that matter here, cores, Python."""
    info = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), platform.processor())
    flags = set(next((ln.split(":", 1)[1].split() for ln in info if ln.startswith("flags")), []))
    isa = ", ".join(f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags)
    return {"cpu": cpu, "isa": isa, "cores": os.cpu_count(), "python": platform.python_version()}


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def run_json(cmd: list[str], **kw) -> dict:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout
    return json.loads(out)


# --- C++ kernel and runtime benchmarks (Google Benchmark) -----------------------------------------------------

def google_benchmark(exe: Path, args: list[str], out: Path, min_time: float, repetitions: int = 1) -> dict[str, float]:
    """name -> real time in ns (the median when a name ran more than once). Repetitions run in random order
    (Google Benchmark's interleaving), so drift on a shared machine hits ours and the baseline alike."""
    cmd = [str(exe), *args, f"--benchmark_min_time={min_time}", "--benchmark_format=json", f"--benchmark_out={out}",
           "--benchmark_out_format=json"]
    if repetitions > 1:
        cmd += [f"--benchmark_repetitions={repetitions}", "--benchmark_enable_random_interleaving=true"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    times: dict[str, list[float]] = {}
    for b in json.loads(out.read_text())["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b["name"].removesuffix("/real_time")
        scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        times.setdefault(name, []).append(b["real_time"] * scale)
    return {k: statistics.median(v) for k, v in times.items()}


def kernel_ratios(t: dict[str, float]) -> dict:
    op = []
    for name, ours in t.items():
        if name.startswith("IdentityOp/"):
            _, dtype, size = name.split("/")
            op.append({"dtype": dtype, "mib": int(size.removesuffix("MiB")), "op_ns": ours,
                       "clone_ns": t[f"Clone/{dtype}/{size}"], "ratio_vs_clone": t[f"Clone/{dtype}/{size}"] / ours})
    conv = []
    for name, ours in t.items():
        if name.startswith("ClassForward/"):
            _, shape, dtype = name.split("/")
            nchw, cl = t[f"AtenConv/nchw/{shape}/{dtype}"], t[f"AtenConv/channels_last/{shape}/{dtype}"]
            clone = t[f"CloneInput/{shape}/{dtype}"]
            conv.append({"shape": shape, "dtype": dtype, "class_ns": ours, "aten_nchw_ns": nchw,
                         "aten_channels_last_ns": cl, "clone_ns": clone,
                         "ratio_vs_aten_best": min(nchw, cl) / ours, "ratio_vs_aten_nchw": nchw / ours,
                         "roofline_fraction": clone / ours})
    dtypes = ["float32", "float64", "float16", "bfloat16"]
    op.sort(key=lambda o: (dtypes.index(o["dtype"]) if o["dtype"] in dtypes else 9, o["mib"]))
    conv.sort(key=lambda c: (c["shape"], c["dtype"] != "float32"))
    return {"identity_op": op, "class_forward": conv}


# --- Per-call latency: pt2run vs Python ------------------------------------------------------------------------

def pt2run_latency(pt2run: Path, package: Path, ops: Path, inputs: Path | None, iters: int, threads: int = 1,
                   runners: int = 1) -> dict:
    cmd = [str(pt2run), "bench", str(package), "--ops", str(ops), "--iters", str(iters), "--warmup",
           str(max(10, iters // 10)), "--threads", str(threads), "--runners", str(runners), "--json"]
    if inputs:
        cmd += ["--input", str(inputs)]
    return run_json(cmd)


PYTHON_LATENCY = r"""
import json, sys, time, statistics, torch
ops, package, inputs, iters, factory = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
torch.ops.load_library(ops)
import my_ops  # noqa: F401  (the fakes, so torch.compile can trace the ops)
import export_tools
from my_ops import models
x = torch.load(inputs)
model, _ = getattr(models, factory)()
aoti = export_tools.load_package(package)  # the variant pt2run loads; torch's loader would load them all
compiled = torch.compile(model, fullgraph=True)
def p50(fn):
    with torch.inference_mode():
        for _ in range(max(10, iters // 10)):
            fn(x)
        lat = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(x)
            lat.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(lat)
result = {"aoti_python_ms": p50(aoti), "eager_ms": p50(model), "compile_ms": p50(compiled)}
if hasattr(model, "depthwise") and hasattr(model, "conv"):  # where the example model's time goes, eager, one part at a time
    with torch.inference_mode():
        y = model.depthwise.forward(x)
        z = torch.ops.my_ops.identity_conv_op(y)
    result["parts_ms"] = {
        "IdentityConvClass.forward": p50(lambda _: model.depthwise.forward(x)),
        "identity_conv_op": p50(lambda _: torch.ops.my_ops.identity_conv_op(y)),
        "ATen conv2d + relu": p50(lambda _: torch.relu(model.conv(z))),
    }
print(json.dumps(result))
"""


def python_latency(python: str, package: Path, ops: Path, inputs: Path, iters: int, factory: str) -> dict:
    return run_json([python, "-c", PYTHON_LATENCY, str(ops), str(package), str(inputs), str(iters), factory],
                    cwd=ROOT)


# --- Cold start and peak RSS -----------------------------------------------------------------------------------

PYTHON_COLD = r"""
import sys, torch
ops, package, inputs, output = sys.argv[1:5]
torch.ops.load_library(ops)
import export_tools
model = export_tools.load_package(package)
torch.save(model(torch.load(inputs)), output)
"""


def measure_process(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one process from start to exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr.read().decode()[-500:]}")
    return wall, usage.ru_maxrss / 1024


def cold_start(pt2run: Path, python: str, package: Path, ops: Path, inputs: Path, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.pt"
        ours = [measure_process([str(pt2run), "run", str(package), "--ops", str(ops), "--input", str(inputs),
                                 "--output", str(out)]) for _ in range(repeats)]
        theirs = [measure_process([python, "-c", PYTHON_COLD, str(ops), str(package), str(inputs), str(out)])
                  for _ in range(repeats)]
    return {"pt2run_s": statistics.median(w for w, _ in ours), "python_s": statistics.median(w for w, _ in theirs),
            "pt2run_peak_rss_mib": max(r for _, r in ours), "python_peak_rss_mib": max(r for _, r in theirs)}


# --- Report ----------------------------------------------------------------------------------------------------

def goals(report: dict) -> list[dict]:
    rows = []
    big = [o for o in report["kernels"]["identity_op"] if o["mib"] >= 64]
    if big:
        worst = min(big, key=lambda o: o["ratio_vs_clone"])
        rows.append({"goal": "op bandwidth vs clone() at >= 64 MiB (worst)", "target": 0.9,
                     "value": worst["ratio_vs_clone"], "where": f"{worst['dtype']} {worst['mib']} MiB"})
    conv = report["kernels"]["class_forward"]
    if conv:
        worst = min(conv, key=lambda c: c["ratio_vs_aten_best"])
        rows.append({"goal": "class forward (NCHW) vs ATen's fastest layout (worst)", "target": 1.0,
                     "value": worst["ratio_vs_aten_best"], "where": f"{worst['shape']} {worst['dtype']}"})
    if "runtime_overhead" in report:
        worst = max(report["runtime_overhead"], key=lambda r: r["overhead"])
        rows.append({"goal": "Runtime::run time / raw AOTI loader (worst)", "target": 1.02, "lower_is_better": True,
                     "value": 1 + worst["overhead"], "where": f"batch {worst['batch']}"})
    if "latency" in report:
        small = report["latency"]["small"]
        rows.append({"goal": "pt2run p50 / Python AOTI p50 (small input)", "target": 0.7, "lower_is_better": True,
                     "value": small["pt2run_ms"] / small["aoti_python_ms"], "where": small["input"]})
        for name, label in (("op_only", "op-only package"), ("conv_heavy", "conv-heavy package")):
            if name in report["latency"]:
                lat = report["latency"][name]
                rows.append({"goal": f"pt2run p50 / Python AOTI p50 ({label})", "target": 0.7,
                             "lower_is_better": True, "value": lat["pt2run_ms"] / lat["aoti_python_ms"],
                             "where": lat["input"]})
    if "cold_start" in report:
        c = report["cold_start"]
        rows.append({"goal": "pt2run cold start / Python", "target": 0.15, "lower_is_better": True,
                     "value": c["pt2run_s"] / c["python_s"], "where": "process start to output file"})
    if "throughput" in report:
        t = {r["runners"]: r["throughput_per_s"] for r in report["throughput"]}
        if 1 in t and 2 in t:
            rows.append({"goal": "throughput, 2 runners / 1 runner", "target": 1.8, "value": t[2] / t[1],
                         "where": "small input, threads = runners"})
    for r in rows:
        r["met"] = r["value"] <= r["target"] if r.get("lower_is_better") else r["value"] >= r["target"]
    return rows


def print_table(report: dict) -> None:
    print("\nidentity_conv_op vs clone() (higher is better)")
    for o in report["kernels"]["identity_op"]:
        print(f"  {o['dtype']:9} {o['mib']:4} MiB  {o['ratio_vs_clone']:5.2f}x")
    print("\nIdentityConvClass.forward (NCHW) vs ATen conv2d(groups=C) (higher is better)")
    print(f"  {'shape':22} {'dtype':9} {'vs best':>8} {'vs nchw':>8} {'of clone':>9}")
    for c in report["kernels"]["class_forward"]:
        print(f"  {c['shape']:22} {c['dtype']:9} {c['ratio_vs_aten_best']:7.2f}x {c['ratio_vs_aten_nchw']:7.2f}x "
              f"{c['roofline_fraction']:8.2f}x")
    for r in report.get("runtime_overhead", []):
        print(f"\nRuntime::run vs raw loader, batch {r['batch']}: {r['runtime_ns'] / 1e3:.1f} us vs "
              f"{r['raw_ns'] / 1e3:.1f} us ({r['overhead'] * 100:+.2f} %); run_into {r['run_into_ns'] / 1e3:.1f} us "
              f"({r['run_into_vs_run']:.3f}x run), reusing run memory {r['run_into_reusing_ns'] / 1e3:.1f} us "
              f"({r['reusing_vs_run_into']:.3f}x)")
    for name, lat in report.get("latency", {}).items():
        print(f"\nper-call p50, {name} input {lat['input']}: pt2run {lat['pt2run_ms']:.3f} ms, Python AOTI "
              f"{lat['aoti_python_ms']:.3f} ms, eager {lat['eager_ms']:.3f} ms, torch.compile {lat['compile_ms']:.3f} ms")
        if "parts_ms" in lat:
            print("  its parts, eager: " + ", ".join(f"{k} {v:.3f} ms" for k, v in lat["parts_ms"].items()))
    if "cold_start" in report:
        c = report["cold_start"]
        print(f"\ncold start: pt2run {c['pt2run_s']:.2f} s ({c['pt2run_peak_rss_mib']:.0f} MiB peak) vs Python "
              f"{c['python_s']:.2f} s ({c['python_peak_rss_mib']:.0f} MiB peak)")
    for t in report.get("throughput", []):
        print(f"throughput, {t['runners']} runner(s): {t['throughput_per_s']:.0f} runs/s")
    print("\ngoals")
    for g in report["goals"]:
        sign = "<=" if g.get("lower_is_better") else ">="
        print(f"  [{'met' if g['met'] else 'NOT MET':7}] {g['goal']}: {g['value']:.3f} ({sign} {g['target']}) "
              f"at {g['where']}")


def chart(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    ops = [o for o in report["kernels"]["identity_op"]]
    ax = axes[0]
    for dtype in sorted({o["dtype"] for o in ops}):
        pts = sorted((o["mib"], o["ratio_vs_clone"]) for o in ops if o["dtype"] == dtype)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=dtype)
    ax.axhline(0.9, color="grey", linestyle="--", label="goal 0.9x")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tensor size (MiB)")
    ax.set_ylabel("identity_conv_op speed / clone() speed")
    ax.set_title("identity_conv_op vs clone()")
    ax.legend()
    conv = report["kernels"]["class_forward"]
    ax = axes[1]
    labels = [f"{c['shape']}\n{c['dtype']}" for c in conv]
    xs = range(len(conv))
    ax.bar([x - 0.2 for x in xs], [c["ratio_vs_aten_best"] for c in conv], width=0.4, label="vs ATen best layout")
    ax.bar([x + 0.2 for x in xs], [c["roofline_fraction"] for c in conv], width=0.4, label="fraction of clone()")
    ax.axhline(1.0, color="grey", linestyle="--", label="goal 1.0x")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), labels, fontsize=7, rotation=30)
    ax.set_ylabel("speed ratio (log)")
    ax.set_title("IdentityConvClass.forward (NCHW)")
    ax.legend(fontsize=8)
    m = report["machine"]
    fig.suptitle(f"{m['cpu']} ({m.get('isa', '?')}) - {m['cores']} cores - torch {m['torch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, required=True, help="the build directory (bin/, lib/)")
    parser.add_argument("--package", type=Path, required=True, help="the example package (dynamic batch)")
    parser.add_argument("--op-package", type=Path,
                        help="the op-only example package: per-call latency where the model itself costs ~nothing")
    parser.add_argument("--conv-package", type=Path,
                        help="the conv-heavy example package (my_ops.models:conv_heavy_net)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="shorter runs and small tensors only (a smoke run)")
    parser.add_argument("--only", choices=["kernels", "runtime"], help="one part only")
    args = parser.parse_args()

    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    bindir, ops = args.build / "bin", args.build / "lib" / "libidentity_conv_ops.so"
    for p in (bindir / "pt2rt_bench_kernels", bindir / "pt2rt_bench_runtime", bindir / "pt2run", ops, args.package):
        if not p.exists():
            print(f"bench: error: {p} is missing (make build, make demo)", file=sys.stderr)
            return 2
    report: dict = {"machine": {**machine(), "torch": torch.__version__}, "command": " ".join(sys.argv)}
    min_time = 0.05 if args.quick else 0.3
    iters = 50 if args.quick else 1000

    if args.only in (None, "kernels"):
        log("kernels (Google Benchmark)")
        sizes = "1,4" if args.quick else "1,4,16,64,256"
        times = google_benchmark(bindir / "pt2rt_bench_kernels", ["--ops", str(ops), "--sizes-mib", sizes] +
                                 (["--benchmark_filter=IdentityOp|Clone/|/1x256x28x28"] if args.quick else []),
                                 args.out / "kernels.json", min_time, 1 if args.quick else 3)
        report["kernels"] = kernel_ratios(times)
    else:
        report["kernels"] = {"identity_op": [], "class_forward": []}

    if args.only in (None, "runtime"):
        spec = json.loads(subprocess.run([str(bindir / "pt2run"), "info", "--json", str(args.package)], check=True,
                                         capture_output=True, text=True).stdout)
        dyn = spec["inputs"][0]["dynamic_dims"]
        large_batch = dyn[0]["max"] if dyn and dyn[0].get("max") else None
        report["runtime_overhead"] = []
        for batch in [None, large_batch] if large_batch else [None]:
            log(f"Runtime::run vs raw loader (batch {batch or 'example'})")
            t = google_benchmark(bindir / "pt2rt_bench_runtime",
                                 ["--package", str(args.package), "--ops", str(ops)] +
                                 (["--batch", str(batch)] if batch else []),
                                 args.out / f"runtime_batch{batch or 'example'}.json", min_time)
            raw = next(v for k, v in t.items() if k.startswith("RawLoaderRun/"))
            ours = next(v for k, v in t.items() if k.startswith("RuntimeRun/"))
            into = next(v for k, v in t.items() if k.startswith("RuntimeRunInto/"))
            reusing = next(v for k, v in t.items() if k.startswith("RuntimeRunIntoReusing/"))
            b = next(k for k in t if k.startswith("RuntimeRun/")).split("batch")[1]
            report["runtime_overhead"].append({"batch": int(b), "runtime_ns": ours, "raw_ns": raw,
                                               "overhead": ours / raw - 1, "run_into_ns": into,
                                               "run_into_vs_run": into / ours, "run_into_reusing_ns": reusing,
                                               "reusing_vs_run_into": reusing / into})

        with tempfile.TemporaryDirectory() as tmp:
            from my_ops import models
            _, (example,) = models.identity_conv_net()
            # name -> (package, model factory, input)
            cases = {"small": (args.package, "identity_conv_net", example)}
            if large_batch:
                cases["large"] = (args.package, "identity_conv_net", torch.randn(large_batch, *example.shape[1:]))
            if args.op_package:
                cases["op_only"] = (args.op_package, "identity_conv_op_only", models.identity_conv_op_only()[1][0])
            if args.conv_package:
                cases["conv_heavy"] = (args.conv_package, "conv_heavy_net", models.conv_heavy_net()[1][0])
            report["latency"] = {}
            for name, (package, factory, x) in cases.items():
                path = Path(tmp) / f"{name}.pt"
                torch.save(x, path)
                log(f"per-call latency, {name} input {list(x.shape)}")
                ours = pt2run_latency(bindir / "pt2run", package, ops, path, iters)
                theirs = python_latency(sys.executable, package, ops, path, iters, factory)
                report["latency"][name] = {"input": list(x.shape), "pt2run_ms": ours["latency_ms"]["p50"], **theirs}
            log("cold start and peak RSS")
            report["cold_start"] = cold_start(bindir / "pt2run", sys.executable, args.package, ops,
                                              Path(tmp) / "small.pt", 3 if args.quick else 5)
            report["throughput"] = []
            for runners in (1, 2, 4):
                log(f"throughput, {runners} runner(s)")
                r = pt2run_latency(bindir / "pt2run", args.package, ops, Path(tmp) / "small.pt", iters * 2,
                                   threads=runners, runners=runners)
                report["throughput"].append({"runners": runners, "throughput_per_s": r["throughput_per_s"],
                                             "p50_ms": r["latency_ms"]["p50"]})

    previous = args.out / "report.json"
    if args.only and previous.exists():  # keep the parts this run did not measure
        old = json.loads(previous.read_text())
        for key, value in old.items():
            if key == "kernels" and not (report["kernels"]["identity_op"] or report["kernels"]["class_forward"]):
                report["kernels"] = value
            elif key not in report:
                report[key] = value
    report["goals"] = goals(report)
    previous.write_text(json.dumps(report, indent=2))
    if report["kernels"]["identity_op"] or report["kernels"]["class_forward"]:
        chart(report, args.out / "chart.png")
    print_table(report)
    print(f"\nreport: {args.out / 'report.json'}" +
          (f", chart: {args.out / 'chart.png'}" if (args.out / "chart.png").exists() else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
