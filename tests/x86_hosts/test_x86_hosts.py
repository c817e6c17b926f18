"""x86-64 host classes this machine is not, emulated by scripts/emulate-x86.sh (scripts/test-x86-hosts.sh runs this
file; it sets PT2RT_TEST_PACKAGES to the C++ tests' packages exported on the emulated haswell, and PT2RUN):
haswell (AVX2 only, x86-64-v3) and nehalem (no AVX, x86-64-v2). What runs emulated sees that CPU through cpuid."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from export_tools import read_spec

ROOT = Path(__file__).resolve().parents[2]
EMULATE = ROOT / "scripts" / "emulate-x86.sh"
PACKAGES = Path(os.environ.get("PT2RT_TEST_PACKAGES", ROOT / "build" / "cpu-release" / "test-packages-haswell"))
PT2RUN = Path(os.environ.get("PT2RUN", ROOT / "build" / "cpu-release" / "bin" / "pt2run"))
OPS = Path(os.environ.get("IDENTITY_CONV_OPS_LIBRARY", ROOT / "build" / "cpu-release" / "lib" / "libidentity_conv_ops.so"))
X86_64_V3 = {"avx", "avx2", "bmi", "bmi2", "crc32", "cx16", "f16c", "fma", "lahf_sahf", "lzcnt", "movbe", "popcnt",
             "sse3", "sse4_1", "sse4_2", "ssse3", "xsave"}


def emulated(host, *argv, env=None, timeout=600):
    full_env = {**os.environ, "PT2RT_OPS_PATH": str(OPS.parent), **(env or {})}
    return subprocess.run([str(EMULATE), host, *map(str, argv)], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def test_the_emulated_cpus_are_what_they_claim(tmp_path):
    """The premise of this file: emulated haswell runs AVX2 and traps AVX-512; nehalem traps AVX."""
    (tmp_path / "isa.c").write_text(
        "int main(int argc, char **argv) {\n"
        "  if (argv[1][0] == '2') __asm__ volatile(\"vpxor %%ymm0, %%ymm0, %%ymm0\" ::: \"xmm0\");\n"
        "  else __asm__ volatile(\"vpxorq %%zmm0, %%zmm0, %%zmm0\" ::: \"xmm0\");\n"
        "  return 0;\n}\n")
    subprocess.run(["cc", "-O1", str(tmp_path / "isa.c"), "-o", str(tmp_path / "isa")], check=True)
    assert emulated("haswell", tmp_path / "isa", "2").returncode == 0
    assert emulated("haswell", tmp_path / "isa", "512").returncode == 128 + 4  # SIGILL
    assert emulated("nehalem", tmp_path / "isa", "2").returncode == 128 + 4


# --- pt2run picks, and refuses, CPU variants ---------------------------------------------------------------------

@pytest.mark.parametrize("host, selected", [("haswell", "avx2"), ("nehalem", "default")])
def test_each_host_class_runs_the_best_variant_it_can(host, selected):
    package = PACKAGES / "net_dynamic.pt2"  # variants avx2, avx512, default
    info = emulated(host, PT2RUN, "info", "--json", package)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["selected"] == selected
    verify = emulated(host, PT2RUN, "verify", package)
    assert verify.returncode == 0, verify.stderr
    assert f"passed on this machine (CPU variant {selected})" in verify.stdout


@pytest.mark.parametrize("host, forced, lacks", [("haswell", "avx512", "avx512bw, avx512cd, avx512dq, avx512f, avx512vl"),
                                                 ("nehalem", "avx2", "avx, avx2,")])
def test_forcing_a_variant_the_host_cannot_run_is_a_package_error(host, forced, lacks):
    result = emulated(host, PT2RUN, "verify", PACKAGES / "net_dynamic.pt2", env={"PT2RT_CPU_ISA": forced})
    assert result.returncode == 3, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"CPU variant {forced} was asked for, but this CPU lacks {lacks}" in line
    assert line.endswith("(the package has: avx2, avx512, default)")


def test_a_default_export_on_haswell_is_code_for_haswell():
    """export_packages.py ran emulated: op_static's native variant is what -march=native means on haswell."""
    (variant,) = read_spec(PACKAGES / "op_static.pt2")["variants"]
    features = set(variant["cpu_features"])
    assert variant["isa"] == "native" and X86_64_V3 <= features
    assert not {f for f in features if f.startswith("avx512")}, sorted(features)
    result = emulated("nehalem", PT2RUN, "verify", PACKAGES / "op_static.pt2")
    assert result.returncode == 3
    assert "no CPU variant of the package runs on this host (native: this CPU lacks " in result.stderr
    assert "export it with --cpu-isa default (or avx2) for a portable variant" in result.stderr


# --- the ops library's kernels ------------------------------------------------------------------------------------

def _ops_tests():
    """ops/tests/test_identity_conv_class.py: its kernel workload (BASELINE), reference and tolerances."""
    import importlib.util

    import my_ops  # noqa: F401  (the module registers nothing; its globals need the class)
    spec = importlib.util.spec_from_file_location("ops_class_tests", ROOT / "ops" / "tests" / "test_identity_conv_class.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OPS_TESTS = _ops_tests()
# the ops tests' workload, plus which kernels ATen itself took
KERNELS = OPS_TESTS.BASELINE + "\ntorch.save(torch.backends.cpu.get_cpu_capability(), sys.argv[1] + '.aten')\n"
# (where, ATEN_CPU_CAPABILITY): forcing a variant is how the ops library is told which kernels to take
RUNS = [("native", "avx2"), ("native", "default"), ("haswell", None), ("haswell", "avx512"), ("haswell", "default")]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    paths = {run: tmp_path_factory.mktemp("kernels") / "out.pt" for run in RUNS}

    def one(run):  # a process each: ATen reads ATEN_CPU_CAPABILITY once
        where, cap = run
        path = paths[run]
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        env |= {"IDENTITY_CONV_OPS_LIBRARY": str(OPS), **({"ATEN_CPU_CAPABILITY": cap} if cap else {})}
        argv = [sys.executable, "-c", KERNELS, str(path)]
        result = subprocess.run(argv if where == "native" else [str(EMULATE), where, *argv], capture_output=True,
                                text=True, env=env, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        return {"outs": torch.load(path), "aten": torch.load(f"{path}.aten")}

    # the emulated runs take minutes each (Python and torch imported under qemu), one core each: all at once, so the
    # cores stay busy to the end (on 2 cores, two at a time left one core idle for the third's whole run)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(RUNS)) as pool:
        return dict(zip(RUNS, pool.map(one, RUNS)))


def test_haswell_takes_the_avx2_kernels(kernels):
    """Bit for bit what the AVX2 kernels give here (each variant's summation order is its own), and right."""
    on_haswell, avx2 = kernels[("haswell", None)], kernels[("native", "avx2")]
    assert on_haswell["aten"] == "AVX2"
    for (x, w, out), (_, _, expected) in zip(on_haswell["outs"], avx2["outs"]):
        assert torch.equal(out, expected), (x.dtype, tuple(x.shape), tuple(w.shape))
        torch.testing.assert_close(out, OPS_TESTS.reference(x, w), **OPS_TESTS.TOL[x.dtype])


def test_asking_for_kernels_above_the_cpu_gives_the_best_it_runs(kernels):
    for (_, _, out), (_, _, expected) in zip(kernels[("haswell", "avx512")]["outs"], kernels[("native", "avx2")]["outs"]):
        assert torch.equal(out, expected)


def test_the_baseline_kernels_on_haswell_are_the_baseline(kernels):
    assert kernels[("haswell", "default")]["aten"] == "DEFAULT"
    pairs = list(zip(kernels[("haswell", "default")]["outs"], kernels[("native", "default")]["outs"]))
    assert all(torch.equal(p[2], q[2]) for p, q in pairs)
    # and that is other code than the AVX2 kernels (the switch is not a no-op)
    assert not all(torch.equal(p[2], a[2]) for p, a in zip(kernels[("haswell", "default")]["outs"],
                                                         kernels[("native", "avx2")]["outs"]))
