"""benchmarks/bench.py's arithmetic: ratios and goal verdicts from measured times (no timing here)."""

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("bench", Path(__file__).resolve().parents[2] / "benchmarks" / "bench.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_kernel_ratios_pick_atens_fastest_layout():
    times = {
        "IdentityOp/float32/64MiB": 100.0, "Clone/float32/64MiB": 95.0,
        "ClassForward/8x64x56x56_k3/float32": 50.0, "AtenConv/nchw/8x64x56x56_k3/float32": 200.0,
        "AtenConv/channels_last/8x64x56x56_k3/float32": 60.0, "CloneInput/8x64x56x56_k3/float32": 10.0,
    }
    r = bench.kernel_ratios(times)
    assert r["identity_op"] == [{"dtype": "float32", "mib": 64, "op_ns": 100.0, "clone_ns": 95.0,
                                 "ratio_vs_clone": 0.95}]
    c = r["class_forward"][0]
    assert c["ratio_vs_aten_best"] == pytest.approx(1.2) and c["ratio_vs_aten_nchw"] == pytest.approx(4.0)
    assert c["roofline_fraction"] == pytest.approx(0.2)


def report(pt2run_small_ms=0.25, pt2run_tiny_ms=0.004):
    return {
        "kernels": bench.kernel_ratios({"IdentityOp/float32/64MiB": 100.0, "Clone/float32/64MiB": 85.0}),
        "runtime_overhead": [{"batch": 4, "runtime_ns": 101.0, "raw_ns": 100.0, "overhead": 0.01, "run_into_ns": 95.0,
                              "run_into_vs_run": 0.94, "run_into_reusing_ns": 99.0,
                              "reusing_vs_run_into": 99.0 / 95.0}],
        "latency": {"small": {"input": [4, 3, 32, 32], "pt2run_ms": pt2run_small_ms, "aoti_python_ms": 0.26,
                              "eager_ms": 0.3, "compile_ms": 0.5},
                    "op_only": {"input": [2, 3, 16, 16], "pt2run_ms": pt2run_tiny_ms, "aoti_python_ms": 0.02,
                                "eager_ms": 0.01, "compile_ms": 0.03}},
        "cold_start": {"pt2run_s": 0.4, "python_s": 6.0, "pt2run_peak_rss_mib": 200,
                       "python_peak_rss_mib": 300},
        "throughput": [{"runners": 1, "throughput_per_s": 1000.0}, {"runners": 2, "throughput_per_s": 1700.0}],
    }


def test_goal_verdicts_follow_the_targets():
    verdicts = {g["goal"]: (round(g["value"], 3), g["met"]) for g in bench.goals(report())}
    assert verdicts == {
        "op bandwidth vs clone() at >= 64 MiB (worst)": (0.85, False),
        "Runtime::run time / raw AOTI loader (worst)": (1.01, True),
        "pt2run p50 / Python AOTI p50 (small input)": (0.962, False),
        "pt2run p50 / Python AOTI p50 (op-only package)": (0.2, True),
        "pt2run cold start / Python": (0.067, True),
        "throughput, 2 runners / 1 runner": (1.7, False),
    }
    assert {g["goal"]: g["met"] for g in bench.goals(report(pt2run_small_ms=0.1))}[
        "pt2run p50 / Python AOTI p50 (small input)"]


def test_table_prints_every_measure(capsys):
    r = report()
    r["goals"] = bench.goals(r)
    bench.print_table(r)
    out = capsys.readouterr().out
    assert "[NOT MET] op bandwidth" in out and "[met    ] pt2run cold start" in out
    assert "op_only input [2, 3, 16, 16]: pt2run 0.004 ms" in out
    assert "run_into 0.1 us (0.940x run), reusing run memory 0.1 us (1.042x)" in out


def _load(name):
    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    s = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(s)
    s.loader.exec_module(module)
    return module


def test_serving_ratios_compare_the_same_package_at_the_same_concurrency():
    serve_bench = _load("serve_bench")

    def pt(server, config, package, clients, rps, p99):
        return {"server": server, "config": config, "package": package, "concurrency": clients,
                "requests_per_s": rps, "p99_ms": p99}

    points = [pt("kserve", "default", "net", 16, 800.0, 20.0), pt("kserve", "default", "net", 4, 1.0, 1.0),
              pt("pt2serve", "batching", "net", 16, 8000.0, 2.0), pt("pt2serve", "no batching", "net", 16, 4000.0, 5.0),
              pt("pt2serve", "batching", "conv", 16, 300.0, 50.0), pt("pt2serve", "no batching", "conv", 16, 100.0, 90.0)]
    r = serve_bench.ratios(points, 16)
    assert r["net: pt2serve (batching) / kserve throughput"] == 10.0
    assert r["net: pt2serve (batching) / kserve p99"] == 0.1
    assert r["net: pt2serve (no batching) / kserve p99"] == 0.25
    assert r["net: batching on / off throughput"] == 2.0
    assert r["conv: batching on / off throughput"] == 3.0
    assert not any(k.startswith("conv: pt2serve") for k in r)  # no KServe point for conv: no ratio made up


def test_the_peer_benchmarks_models_are_the_published_architectures():
    """benchmarks/peer_models.py rebuilds torchvision's ResNet-18, MobileNetV3-Small, EfficientNet-B0 and ShuffleNetV2
    (whose CUDA wheels do not load beside the CPU torch) and DeiT-Tiny's ViT: a layer left out or mis-sized changes
    the parameter count."""
    import torch

    spec = importlib.util.spec_from_file_location(
        "peer_models", Path(__file__).resolve().parents[2] / "benchmarks" / "peer_models.py")
    peer_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer_models)
    for name, expected in peer_models.PUBLISHED_PARAMETERS.items():
        model, inputs = peer_models.MODELS[name]()
        assert sum(p.numel() for p in model.parameters()) == expected, name
        with torch.no_grad():
            out = model(*inputs)
            other = model(torch.randn(inputs[0].shape, generator=torch.Generator().manual_seed(7)))
        assert out.shape == (1, 1000)
        # the output depends on the input: the benchmark's check of each engine against eager means something
        assert (out - other).abs().max() > 0.01 * out.abs().max(), f"{name}: the output ignores the input"
    # no two layers share weights: an ONNX export would store them once, and the peers would run on one layer's
    for name in ("bert_base", "vit_tiny"):
        model, _ = peer_models.MODELS[name]()
        layers = model.encoder.layers
        for i in range(1, len(layers)):
            for (key, a), b in zip(layers[0].state_dict().items(), layers[i].state_dict().values()):
                assert not torch.equal(a, b), f"{name}: layers 0 and {i} share {key}"
