"""export_tools.cpu: CPU variants, the features their flags imply, and that each compiled variant holds code for
its own ISA only."""

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from export_tools import TargetTorchError, cpu, read_spec

# Every vector ISA class of torch's inductor, by the architecture its code is for. A torch that adds a class fails
# test_every_torch_isa_class_is_classified until someone decides what pt2rt does with it.
TORCH_ISA_ARCH = {
    "VecAVX2": "x86_64", "VecAVX512": "x86_64", "VecAVX512VNNI": "x86_64", "VecAMX": "x86_64",
    "VecNEON": "aarch64", "VecSVE": "aarch64", "VecVSX": "ppc64le", "VecZVECTOR": "s390x",
    "InvalidVecISA": None,  # scalar code: the baseline of whatever arch
}
X86_64_V3 = {"avx", "avx2", "bmi", "bmi2", "crc32", "cx16", "f16c", "fma", "lahf_sahf", "lzcnt", "movbe", "popcnt",
             "sse3", "sse4_1", "sse4_2", "ssse3", "xsave"}
AVX512_BASE = {"avx512f", "avx512dq", "avx512vl", "avx512bw"}
TORCH_VERSION = torch.__version__.split("+")[0]
ROOT = Path(__file__).resolve().parents[2]


def test_every_torch_isa_class_is_classified():
    names = {type(isa).__name__ for isa in cpu.every_torch_isa()}
    assert names == set(TORCH_ISA_ARCH), f"torch's inductor ISA classes changed: {sorted(names ^ set(TORCH_ISA_ARCH))}"


@pytest.mark.parametrize("isa", [i for i in cpu.every_torch_isa() if TORCH_ISA_ARCH[type(i).__name__] == "x86_64"],
                         ids=lambda i: type(i).__name__)
def test_each_x86_torch_isa_maps_to_features_that_imply_its_flags(isa):
    flags = tuple(isa.build_arch_flags().split())
    features = set(cpu.features_for_flags(("-march=x86-64", *flags)))
    for flag in flags:  # -mavx512bf16 -> avx512bf16, -mamx-tile -> amx_tile: each flag is a feature itself
        assert flag.removeprefix("-m").replace("-", "_") in features, (flag, sorted(features))
    assert {"avx", "avx2", "fma"} <= features  # what every x86 vector ISA torch has implies


def test_portable_levels_have_exactly_their_level_features():
    assert set(cpu.features_for_flags(("-march=x86-64",))) == set()
    assert set(cpu.features_for_flags(("-march=x86-64-v3",))) == X86_64_V3
    assert set(cpu.features_for_flags(("-march=x86-64-v4",))) == X86_64_V3 | AVX512_BASE | {"avx512cd"}


@pytest.mark.parametrize("name, vec_isa, level", [("avx512", "avx512", "x86-64-v4"), ("avx2", "avx2", "x86-64-v3"),
                                                  ("default", "default", "x86-64")])
def test_portable_variants_use_their_level_and_nothing_of_this_host(name, vec_isa, level):
    with cpu.compiling(name) as v:
        assert v.vec_isa == vec_isa and v.arch == "x86_64"
        assert v.flags[0] == f"-march={level}"
        assert "-mavx512bf16" not in v.flags and "-mavx512vnni" not in v.flags  # never the build host's extras
        assert set(v.cpu_features) == set(cpu.features_for_flags((f"-march={level}",)))


def test_native_variant_needs_what_this_host_has():
    with cpu.compiling("native") as v:
        assert "-march=native" in v.flags
        assert set(v.cpu_features) <= cpu.host_features()
        assert X86_64_V3 <= set(v.cpu_features)  # every host that runs these tests has AVX2


def test_the_compilers_vocabulary_holds_every_level_and_this_host():
    # the runtime's gtest checks it knows every name in compiler_features(); this checks that set is the whole of
    # what a variant can record
    names = cpu.compiler_features()
    assert cpu.host_features() <= names
    for name in cpu.PORTABLE_X86:
        with cpu.compiling(name) as v:
            assert set(v.cpu_features) <= names, name
    assert not names & {"android", "ilp32", "long_double_64"}  # ABI flags are no CPU features


def test_synthetic_feature_sets_decide_where_a_variant_runs(monkeypatch):
    monkeypatch.setattr(cpu, "host_features", lambda: frozenset(X86_64_V3))
    assert cpu.runs_here("x86_64", sorted(X86_64_V3)) == []
    assert cpu.runs_here("x86_64", ["avx2", "avx512f", "avx512bf16"]) == ["avx512bf16", "avx512f"]
    assert cpu.runs_here("aarch64", []) == ["arch aarch64"]


@pytest.mark.parametrize("value, expected", [(None, ["native"]), ("avx2", ["avx2"]),
                                             ("avx2, avx512", ["avx2", "avx512"]), (("default", "native"), ["default", "native"])])
def test_variant_names(value, expected):
    assert cpu.parse_names(value) == expected


def _disassembly(path, record, tmp_path):
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith("/" + record))
        lib = tmp_path / "lib.so"
        lib.write_bytes(zf.read(name))
    return subprocess.run(["objdump", "-d", str(lib)], capture_output=True, check=True, text=True).stdout


def test_each_variant_library_holds_code_of_its_own_isa_only(exported, tmp_path):
    # A portable variant compiled on an AVX-512 host must not carry AVX-512 code (-march=native did, once).
    path, _, _ = exported("net_dynamic")
    registers = {}
    for v in read_spec(path)["variants"]:
        asm = _disassembly(path, v["record"], tmp_path)
        registers[v["isa"]] = ("%zmm" in asm, "%ymm" in asm)
    assert registers == {"avx512": (True, True), "avx2": (False, True), "default": (False, False)}


def test_same_graph_other_weights_gets_its_own_code_in_every_variant(exported, tmp_path):
    """Inductor's cache can hand a compile another compile's generated code (same graph, other constants).
    A second model shaped like net_dynamic, with other weights, compiled after it (here or by the C++ tests' export)
    for the same variants: each variant must be its own library and reproduce its own eager model (export verifies
    every variant this CPU runs; the runtime forces each one below)."""
    import torch
    from export_tools import export_package, load_package
    from my_ops import models

    first, _, _ = exported("net_dynamic")
    model, (x,) = models.identity_conv_net()
    with torch.no_grad():
        model.conv.weight.neg_()
        model.depthwise.set_weight(model.depthwise.get_weight().flip(-1))
    second = export_package(model, (x,), tmp_path / "other.pt2", dynamic_batch=(1, 32),
                            cpu_isa=("avx2", "avx512", "default"), golden=2)
    a, b = read_spec(first)["variants"], read_spec(second)["variants"]
    assert [v["isa"] for v in a] == [v["isa"] for v in b]
    assert all(va["sha256"] != vb["sha256"] for va, vb in zip(a, b))
    with torch.no_grad():
        expected = model(x)
    for v in b:
        if cpu.runs_here(v["arch"], v["cpu_features"]):
            continue
        torch.testing.assert_close(load_package(second, v["isa"])(x), expected)


@pytest.mark.parametrize("target, cpu_isa, expected", [
    (None, None, ["native"]),
    ("host", "avx2,avx512", ["avx2", "avx512"]),
    ("linux-aarch64", None, ["neon"]),
    ("linux-aarch64", "neon", ["neon"]),
    ("linux-x86_64,linux-aarch64", None, ["native", "neon"]),
    (("linux-x86_64", "linux-aarch64"), ("default", "avx2"), ["default", "avx2", "neon"]),
    ("linux-aarch64,linux-x86_64", "avx2", ["neon", "avx2"]),
])
def test_targets_give_each_arch_its_variants(target, cpu_isa, expected):
    assert cpu.plan(target, cpu_isa) == expected


@pytest.mark.parametrize("target, cpu_isa, message", [
    ("linux-aarch64", "avx2", "cpu_isa avx2 is for x86_64, which is not a target here (linux-aarch64)"),
    ("linux-aarch64", "native", "cpu_isa native is for x86_64, which is not a target here"),
    ("linux-riscv64", None, "unknown target 'linux-riscv64': expected host, linux-x86_64, linux-aarch64"),
    ("host,linux-x86_64", None, "target lists linux-x86_64 twice (host is linux-x86_64)"),
    ("", None, "expected one or more targets"),
    ("linux-x86_64", "neon", "cpu_isa neon is for aarch64, which is not a target here (linux-x86_64)"),
])
def test_bad_targets_are_one_line_errors(target, cpu_isa, message):
    with pytest.raises(cpu.CpuVariantError) as err:
        cpu.plan(target, cpu_isa)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cross_target_without_its_libtorch_says_what_to_run(monkeypatch, tmp_path):
    from export_tools import cross
    monkeypatch.delenv("PT2RT_TORCH_LINUX_AARCH64", raising=False)
    monkeypatch.setenv("PT2RT_TARGETS_DIR", str(tmp_path))  # nothing fetched
    monkeypatch.setenv("PT2RT_CXX_LINUX_AARCH64", "no-such-compiler-g++")
    with pytest.raises(cpu.CpuVariantError, match="needs the C\\+\\+ cross compiler no-such-compiler-g\\+\\+"):
        cross.toolchain("linux-aarch64")
    # any compiler, with an objcopy of the target's name beside it (a machine without the cross binutils has
    # none): the libtorch check comes next
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "g++").symlink_to(shutil.which("g++"))
    (tools / "aarch64-linux-gnu-objcopy").symlink_to(shutil.which("objcopy"))
    monkeypatch.setenv("PT2RT_CXX_LINUX_AARCH64", str(tools / "g++"))
    with pytest.raises(TargetTorchError, match=f"libtorch {TORCH_VERSION}: run `python -m export_tools "
                                                  "fetch-target linux-aarch64`"):
        cross.toolchain("linux-aarch64")
    monkeypatch.setenv("PT2RT_TORCH_LINUX_AARCH64", str(tmp_path / "nothing"))
    with pytest.raises(TargetTorchError, match="is not a libtorch folder"):
        cross.toolchain("linux-aarch64")


def _wheel(path: Path, machine: int) -> Path:
    """A stand-in torch wheel: a header and libraries whose ELF header names `machine` (183: aarch64, 62: x86-64),
    and the metadata pip reads."""
    elf = b"\x7fELF" + bytes(14) + machine.to_bytes(2, "little") + bytes(44)
    _, version, *tags = path.stem.split("-")
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"torch-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        zf.writestr(f"torch-{version}.dist-info/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                                                        f"Tag: {'-'.join(tags)}\n")
        zf.writestr(f"torch-{version}.dist-info/RECORD", "")
        zf.writestr("torch/__init__.py", "")
        zf.writestr("torch/include/torch/script.h", "// a header\n")
        for lib in ("libtorch_cpu.so", "libc10.so", "libgomp.so.1", "libtorch_cuda.so", "libc10_cuda.so",
                    "libtorch_python.so", "libshm.so"):
            zf.writestr(f"torch/lib/{lib}", elf)
    return path


def test_fetch_target_unpacks_the_libtorch_export_then_finds(monkeypatch, tmp_path, capsys):
    """fetch-target --wheel: the headers and CPU libraries of a target's torch wheel of this torch's version, unpacked
    once into the per-machine folder, where cross.toolchain finds them with no setting; wrong wheels are one-line
    errors that leave nothing behind."""
    from export_tools import targets
    from export_tools.__main__ import main
    monkeypatch.delenv("PT2RT_TORCH_LINUX_AARCH64", raising=False)
    monkeypatch.setenv("PT2RT_TARGETS_DIR", str(tmp_path / "targets"))
    tag = "cp311-cp311-manylinux_2_28"
    (tmp_path / "x86").mkdir()
    bad = {
        tmp_path / "absent.whl": "does not exist",
        _wheel(tmp_path / f"torch-1.0.0-{tag}_aarch64.whl", 183): f"is not a torch {TORCH_VERSION} wheel",
        _wheel(tmp_path / f"torch-{TORCH_VERSION}-{tag}_x86_64.whl", 62): "is not a wheel for linux-aarch64",
        _wheel(tmp_path / "x86" / f"torch-{TORCH_VERSION}-{tag}_aarch64.whl", 62): "libtorch_cpu.so is not built for "
                                                                                   "linux-aarch64",
    }
    for wheel, message in bad.items():
        code = main(["fetch-target", "linux-aarch64", "--wheel", str(wheel)])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert [p for p in (tmp_path / "targets").rglob("*") if p.is_file()] == []

    good = _wheel(tmp_path / f"torch-{TORCH_VERSION}-{tag}_aarch64.whl", 183)
    assert main(["fetch-target", "linux-aarch64", "--wheel", str(good)]) == 0
    fetched = Path(capsys.readouterr().out.strip())
    assert fetched == tmp_path / "targets" / "linux-aarch64" / f"torch-{TORCH_VERSION}" / "torch"
    assert sorted(p.name for p in (fetched / "lib").iterdir()) == ["libc10.so", "libgomp.so.1", "libtorch_cpu.so"]
    assert (fetched / "include" / "torch" / "script.h").is_file()
    assert targets.target_torch("linux-aarch64") == fetched
    # find_package(Torch) of a cross build finds a CPU-only config there, from the templates the libtorch recipe
    # exports and writes too
    recipe = ast.parse((ROOT / "recipes" / "libtorch" / "all" / "conanfile.py").read_text())
    (relative,) = [ast.literal_eval(n.value) if isinstance(n.value, ast.Constant) else
                   [ast.literal_eval(a) for a in n.value.args] for n in recipe.body
                   if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "_CMAKE_TEMPLATES"]
    recipe_templates = (ROOT / "recipes" / "libtorch" / "all").joinpath(*relative).resolve()
    assert recipe_templates == targets.CMAKE_TEMPLATES.resolve()
    written = fetched / "share" / "cmake" / "Torch" / "TorchConfig.cmake"
    template = (targets.CMAKE_TEMPLATES / "TorchConfig.cmake.in").read_text()
    assert "@VERSION@" in template and written.read_text() == template.replace("@VERSION@", TORCH_VERSION)
    assert f'set(PACKAGE_VERSION "{TORCH_VERSION}")' in (written.parent / "TorchConfigVersion.cmake").read_text()
    written.unlink()  # fetched by a version that wrote none: the next fetch-target adds it
    assert main(["fetch-target", "linux-aarch64", "--wheel", str(good)]) == 0 and written.is_file()
    capsys.readouterr()
    # once per machine: a second fetch finds it and downloads nothing
    monkeypatch.setattr(targets, "_download", lambda *a: pytest.fail("downloaded again"))
    assert main(["fetch-target", "linux-aarch64"]) == 0 and Path(capsys.readouterr().out.strip()) == fetched


def test_fetch_target_downloads_this_torchs_wheel_with_pip(monkeypatch, tmp_path, capsys):
    """fetch-target without --wheel: pip downloads this torch's wheel for the target - here from a folder standing in
    for the package index (PIP_NO_INDEX, PIP_FIND_LINKS: pip's own settings, read from the environment). With none
    to be had, a one-line error naming --wheel; a wheel of another torch version is not taken."""
    from export_tools.__main__ import main
    monkeypatch.delenv("PT2RT_TORCH_LINUX_AARCH64", raising=False)
    monkeypatch.setenv("PT2RT_TARGETS_DIR", str(tmp_path / "targets"))
    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    _wheel(index / f"torch-1.0.0-{py}-{py}-manylinux_2_28_aarch64.whl", 183)
    _wheel(index / f"torch-{TORCH_VERSION}-{py}-{py}-manylinux_2_28_x86_64.whl", 62)
    code = main(["fetch-target", "linux-aarch64"])
    err = capsys.readouterr().err
    (error,) = [line for line in err.splitlines() if "error:" in line]
    assert code == 2 and f"cannot download torch {TORCH_VERSION} for linux-aarch64: " in error, err
    assert "torch==2" in error and "--wheel FILE" in error, err  # pip's own reason, then the way out
    _wheel(index / f"torch-{TORCH_VERSION}-{py}-{py}-manylinux_2_28_aarch64.whl", 183)
    assert main(["fetch-target", "linux-aarch64"]) == 0
    fetched = Path(capsys.readouterr().out.strip())
    assert fetched == tmp_path / "targets" / "linux-aarch64" / f"torch-{TORCH_VERSION}" / "torch"
    assert sorted(p.name for p in (fetched / "lib").iterdir()) == ["libc10.so", "libgomp.so.1", "libtorch_cpu.so"]
