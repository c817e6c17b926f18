"""linux-aarch64 packages from this x86-64 machine, run by the cross-built pt2run under qemu (scripts/test-aarch64.sh
runs this file after scripts/cross-build.sh, which fetched the aarch64 libtorch (fetch-target); it sets
PT2RT_CROSS_BUILD_DIR)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch

from export_tools import export_package, read_spec
from my_ops import models

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "cpp"))
import export_packages  # noqa: E402  (its machine cache of exported test packages)
CROSS = Path(os.environ.get("PT2RT_CROSS_BUILD_DIR", ROOT / "build" / "aarch64-release"))
NATIVE = Path(os.environ.get("PT2RT_NATIVE_BUILD_DIR", ROOT / "build" / "cpu-release"))
QEMU = ROOT / "scripts" / "qemu-aarch64.sh"
CMAKE = Path(sys.executable).parent / "cmake"  # the venv's


def pt2run_aarch64(*args, env=None, check=True):
    """The cross-built pt2run under qemu; its ops library from the cross build."""
    cmd = [str(QEMU), str(CROSS / "bin" / "pt2run"), *args]
    full_env = {**os.environ, "PT2RT_OPS_PATH": str(CROSS / "lib"), **(env or {})}
    result = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()[-2000:]}")
    return result


def pt2run_native(*args, env=None, check=True):
    full_env = {**os.environ, "PT2RT_OPS_PATH": str(NATIVE / "lib"), **(env or {})}
    result = subprocess.run([str(NATIVE / "bin" / "pt2run"), *args], capture_output=True, text=True, env=full_env,
                            timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()[-2000:]}")
    return result


def other_weights(model):
    """The same graph as `model` with other weights."""
    with torch.no_grad():
        model.conv.weight.neg_()
        model.conv.bias.add_(0.5)
        model.depthwise.set_weight(model.depthwise.get_weight().flip(-1))
    return model


def export_all(out: Path) -> None:
    net, (x,) = models.identity_conv_net()
    op, (y,) = models.identity_conv_op_only()
    export_package(net, (x,), out / "net.pt2", dynamic_batch=(1, 32), target="linux-aarch64")
    export_package(op, (y,), out / "op.pt2", target="linux-aarch64")
    export_package(net, (x,), out / "multi.pt2", dynamic_batch=(1, 32), target=("linux-x86_64", "linux-aarch64"),
                   cpu_isa=("default", "avx2"), golden=2)
    # same-shaped models with other weights (see test_same_graph_other_weights_gets_its_own_code)
    export_package(net, (x,), out / "m0.pt2", target="linux-aarch64", golden=1)
    export_package(other_weights(models.identity_conv_net()[0]), (x,), out / "m1.pt2", target="linux-aarch64",
                   golden=1)
    export_package(op, (y,), out / "x86_only.pt2", cpu_isa=("default",), golden=1)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """What export_all exports, compiled once per machine for the same sources: kept in the C++ tests' machine cache
    (tests/cpp/export_packages.py) under what shapes the C++ tests' aarch64 packages and this file."""
    out = tmp_path_factory.mktemp("aarch64") / "packages"
    shaping = export_packages.fingerprint(NATIVE / "lib" / "libpt2rt_probe_ops.so", "linux-aarch64")
    fp = hashlib.sha256(shaping.encode() + Path(__file__).read_bytes()).hexdigest()
    cache = export_packages.machine_cache()
    if not export_packages.from_cache(cache, fp, out):
        out.mkdir()
        export_all(out)
        (out / "fingerprint").write_text(fp)
        export_packages.to_cache(cache, fp, out)
    return {p.stem: p for p in out.glob("*.pt2")}


@pytest.mark.parametrize("name", ["net", "op", "multi"])
def test_golden_cases_pass_on_aarch64(packages, name):
    out = pt2run_aarch64("verify", str(packages[name])).stdout
    assert "CPU variant neon" in out and "passed" in out


def test_spec_records_the_aarch64_variant(packages):
    spec = read_spec(packages["net"])
    (variant,) = spec["variants"]
    assert variant["isa"] == "neon" and variant["arch"] == "aarch64" and variant["compile_flags"] == ["-march=armv8-a"]
    info = json.loads(pt2run_aarch64("info", "--json", str(packages["net"])).stdout)
    assert info["selected"] == "neon"
    assert [v["sha256"] for v in info["variants"]] == [variant["sha256"]]


def test_output_equals_x86_eager(packages, tmp_path):
    model, _ = models.identity_conv_net()
    x = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    torch.save(x, tmp_path / "x.pt")
    pt2run_aarch64("run", str(packages["net"]), "--input", str(tmp_path / "x.pt"), "--output", str(tmp_path / "y.pt"))
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(torch.load(tmp_path / "y.pt"), expected, rtol=1e-5, atol=1e-5)


def test_same_graph_other_weights_gets_its_own_code(packages, tmp_path):
    """Fixed generated file names and inductor's cache could give the second model the first one's code: two
    same-shaped models with different weights, each must match its own eager model on aarch64."""
    first, (x,) = models.identity_conv_net()
    second = other_weights(models.identity_conv_net()[0])
    paths = [packages["m0"], packages["m1"]]
    assert read_spec(paths[0])["variants"][0]["sha256"] != read_spec(paths[1])["variants"][0]["sha256"]
    torch.save(x, tmp_path / "x.pt")
    outputs = []
    for i, (model, path) in enumerate(zip((first, second), paths)):
        pt2run_aarch64("run", str(path), "--input", str(tmp_path / "x.pt"), "--output", str(tmp_path / f"y{i}.pt"))
        with torch.no_grad():
            expected = model(x)
        outputs.append(torch.load(tmp_path / f"y{i}.pt"))
        torch.testing.assert_close(outputs[-1], expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(outputs[0], outputs[1])


def test_one_package_runs_on_both_arches(packages):
    path = str(packages["multi"])
    spec = read_spec(path)
    jsonschema.validate(spec, json.loads((ROOT / "docs" / "pt2rt-spec-2.schema.json").read_text()))
    assert [(v["isa"], v["arch"]) for v in spec["variants"]] == [
        ("default", "x86_64"), ("avx2", "x86_64"), ("neon", "aarch64")]
    here = json.loads(pt2run_native("info", "--json", path).stdout)
    there = json.loads(pt2run_aarch64("info", "--json", path).stdout)
    assert here["selected"] == "avx2" and there["selected"] == "neon"
    assert "CPU variant avx2" in pt2run_native("verify", path).stdout
    assert "CPU variant default" in pt2run_native("verify", path, env={"PT2RT_CPU_ISA": "default"}).stdout


def test_a_variant_for_the_other_arch_is_refused_with_exit_3(packages):
    path = str(packages["multi"])
    r = pt2run_native("verify", path, env={"PT2RT_CPU_ISA": "neon"}, check=False)
    assert r.returncode == 3
    assert "it is for aarch64, this host is x86_64" in r.stderr and "default, avx2, neon" in r.stderr
    r = pt2run_aarch64("verify", path, env={"PT2RT_CPU_ISA": "avx2"}, check=False)
    assert r.returncode == 3
    assert "it is for x86_64, this host is aarch64" in r.stderr and "default, avx2, neon" in r.stderr


def test_a_package_without_an_aarch64_variant_is_refused_with_exit_3(packages):
    r = pt2run_aarch64("verify", str(packages["x86_only"]), check=False)
    assert r.returncode == 3
    assert "no CPU variant of the package runs on this host" in r.stderr and "default: it is for x86_64" in r.stderr


def test_the_x86_pt2run_refuses_an_aarch64_only_package_with_exit_3(packages):
    r = pt2run_native("verify", str(packages["net"]), check=False)
    assert r.returncode == 3
    assert "no CPU variant of the package runs on this host (neon: it is for aarch64, this host is x86_64)" in r.stderr


def test_python_verify_says_what_it_could_not_run(packages):
    def verify(path):
        return subprocess.run([sys.executable, "-m", "export_tools", "-q", "verify", str(path), "--ops-library",
                               str(NATIVE / "lib" / "libidentity_conv_ops.so")],
                              capture_output=True, text=True, cwd=ROOT)

    both = verify(packages["multi"])
    assert both.returncode == 0, both.stderr
    assert "neon (aarch64): not run on this x86_64 machine" in both.stderr and "avx2" in both.stdout
    only = verify(packages["op"])
    assert only.returncode == 1 and "nothing was verified" in only.stderr


def test_an_op_of_your_own_cross_built_for_aarch64(tmp_path):
    """docs/ops.md, "For linux-aarch64": a scaffolded op (export-tools new-op) built here against the native runtime
    and this Python's torch (to export with), cross-built against the cross build's runtime and the aarch64 libtorch
    fetch-target unpacked (with its TorchConfig.cmake), a model using it exported for linux-aarch64, and pt2run under
    qemu running it with the cross-built library, equal to eager."""
    def run(*cmd, **kw):
        result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
        assert result.returncode == 0, f"{' '.join(map(str, cmd))}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
        return result.stdout

    proj = tmp_path / "proj"
    run(sys.executable, "-m", "export_tools", "new-op", "acme::scale2", "--out", proj)
    fetched = Path(run(sys.executable, "-m", "export_tools", "-q", "fetch-target", "linux-aarch64").strip())
    builds = {
        "native": (NATIVE, [torch.utils.cmake_prefix_path], []),
        "aarch64": (CROSS, [fetched], [f"-DCMAKE_TOOLCHAIN_FILE={ROOT / 'cmake' / 'toolchains' / 'linux-aarch64.cmake'}"]),
    }
    for name, (runtime_build, prefixes, extra) in builds.items():
        dist = tmp_path / f"dist-{name}"
        run(CMAKE, "--install", runtime_build, "--prefix", dist)
        run(CMAKE, "-S", proj, "-B", tmp_path / f"build-{name}", "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={';'.join(map(str, [dist, *prefixes]))}", *extra)
        run(CMAKE, "--build", tmp_path / f"build-{name}", "-j", os.cpu_count() or 1)
    library = tmp_path / "build-aarch64" / "libacme_ops.so"
    assert library.read_bytes()[18:20] == (183).to_bytes(2, "little"), "not an aarch64 library"

    script = f"""
import sys, torch
sys.path.insert(0, {str(proj / 'python')!r})
import os
os.environ["ACME_OPS_LIBRARY"] = {str(tmp_path / 'build-native' / 'libacme_ops.so')!r}
import acme_ops  # noqa: F401
from export_tools import export_package

class M(torch.nn.Module):
    def forward(self, x):
        return torch.ops.acme.scale2(x) + 1

x = torch.randn(2, 5)
export_package(M(), (x,), sys.argv[1], target="linux-aarch64", golden=1)
torch.save(x, sys.argv[2])
torch.save(M()(x), sys.argv[3])
"""
    run(sys.executable, "-c", script, tmp_path / "m.pt2", tmp_path / "x.pt", tmp_path / "eager.pt")
    pt2run_aarch64("run", str(tmp_path / "m.pt2"), "--ops", str(library), "--input", str(tmp_path / "x.pt"),
                   "--output", str(tmp_path / "y.pt"))
    torch.testing.assert_close(torch.load(tmp_path / "y.pt"), torch.load(tmp_path / "eager.pt"))


def test_the_aarch64_lite_bundle_verifies_and_runs_a_lite_package_equal_to_eager(tmp_path):
    """make lite TARGET=linux-aarch64's bundle (scripts/test-aarch64.sh builds it first) runs a package exported here
    with --lite for linux-aarch64: convolutions, products, attention and a GRU in NEON's kernels, under qemu, with
    no libtorch anywhere; my_ops::identity_conv_op from the bundle's libidentity_conv_ops_lite.so."""
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from test_lite import Tagger, _Recurrent  # noqa: PLC0415

    class OpTagger(Tagger):
        def forward(self, x):
            return super().forward(torch.ops.my_ops.identity_conv_op(x))

    dist = Path(os.environ.get("PT2RT_LITE_AARCH64_DIST", ROOT / "dist-lite-linux-aarch64"))
    pt2run = dist / "bin" / "pt2run"
    assert pt2run.is_file(), f"{pt2run} is not built (make lite TARGET=linux-aarch64)"
    for f in [*dist.glob("lib/*.so*"), pt2run]:
        needed = subprocess.run(["readelf", "-d", str(f)], capture_output=True, text=True, check=True).stdout
        header = subprocess.run(["readelf", "-h", str(f)], capture_output=True, text=True, check=True).stdout
        assert "AArch64" in header and not any(n in needed for n in ("libtorch", "libc10", "libpython")), f
    torch.manual_seed(0)
    env = {**os.environ, "PT2RT_QEMU_LIBRARY_PATH": "/usr/lib/aarch64-linux-gnu"}
    assert (dist / "lib" / "libidentity_conv_ops_lite.so").is_file()
    for name, model, x in (("tagger", OpTagger().eval(), torch.randn(2, 3, 20, 20)),
                           ("recurrent", _Recurrent().eval(), torch.randint(0, 100, (3, 7)))):
        path = export_package(model, (x,), tmp_path / f"{name}.pt2", target="linux-aarch64", lite=True, golden=2)
        assert [v["arch"] for v in read_spec(path)["lite_variants"]] == ["aarch64"]
        result = subprocess.run([str(QEMU), str(pt2run), "verify", str(path)], capture_output=True, text=True,
                                env=env, timeout=600)
        assert result.returncode == 0 and "CPU variant neon" in result.stdout, result.stdout + result.stderr
        torch.save([x], tmp_path / "x.pt")
        result = subprocess.run([str(QEMU), str(pt2run), "run", str(path), "-i", str(tmp_path / "x.pt"), "-o",
                                 str(tmp_path / "y.pt")], capture_output=True, text=True, env=env, timeout=600)
        assert result.returncode == 0, result.stderr
        with torch.no_grad():
            expected = model(x)
        for a, e in zip(torch.load(tmp_path / "y.pt"), expected):
            torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
