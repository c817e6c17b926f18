"""The export-tools CLI: the happy path once, and every bad input as exit 2 with one clear line."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch

from packages import copy_package

from export_tools.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module `user_models` the way a user writes one, importable by name."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "user_models.py").write_text(textwrap.dedent("""
        import torch
        import export_tools  # loads the ops library

        class NeedsBatchFour(torch.nn.Module):
            def forward(self, x):
                return torch.ops.my_ops.identity_conv_op(x).reshape(4, -1)

        def batch_four():
            return NeedsBatchFour(), (torch.randn(4, 3, 8, 8),)

        def not_a_pair():
            return 42

        def not_a_module():
            return "model", (torch.randn(1),)

        def bad_inputs():
            return torch.nn.Identity(), "x"

        not_callable = 3

        def raises():
            raise ValueError("factory broke")
    """))
    monkeypatch.syspath_prepend(str(src))
    return "user_models"


@pytest.fixture
def private_tmp(tmp_path_factory, monkeypatch):
    """A TMPDIR of its own for a command that fails: it must be empty afterwards (nothing left behind)."""
    d = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    yield d
    # torch's compile cache (torchinductor_<user>) is shared by design and may be created empty by a failed
    # torch.export; anything else is ours.
    left = sorted(str(p.relative_to(d)) for p in d.rglob("*")
                  if not (p.is_dir() and p.name.startswith("torchinductor_") and not any(p.iterdir())))
    assert left == [], f"a failed command left files in TMPDIR: {left}"


def run_cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's own usage errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(code, err, message, out_dir=None):
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("export-tools: error: "), err
    assert message in lines[-1], err
    assert "Traceback" not in err
    if out_dir is not None:
        assert list(Path(out_dir).iterdir()) == [], "a failed export left files behind"


@pytest.mark.parametrize("model, message", [
    ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
    ("my_ops.models:nope", "module 'my_ops.models' has no attribute 'nope'"),
    ("my_ops.models", "expected --model MODULE:FACTORY, got 'my_ops.models'"),
    ("{mod}:not_a_pair", "{mod}:not_a_pair() must return (model, example_inputs), got int"),
    ("{mod}:not_a_module", "returned a str as the model; expected a torch.nn.Module"),
    ("{mod}:bad_inputs", "returned example inputs of type str; expected a tuple of tensors"),
    ("{mod}:not_callable", "{mod}:not_callable is not callable"),
    ("{mod}:raises", "{mod}:raises() failed: ValueError: factory broke"),
])
def test_bad_model_argument(private_tmp, capsys, tmp_path, user_module, model, message):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, _, err = run_cli(capsys, "export", "--model", model.format(mod=user_module), "--out", str(out_dir / "m.pt2"))
    assert_usage_error(code, err, message.format(mod=user_module), out_dir)


def test_dynamic_range_the_model_cannot_export(private_tmp, capsys, tmp_path, user_module):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, _, err = run_cli(capsys, "export", "--model", f"{user_module}:batch_four", "--out", str(out_dir / "m.pt2"),
                           "--dynamic-batch", "1:32")
    assert_usage_error(code, err, "torch.export failed with dynamic dims batch 1:32: the model only runs batch = 4 "
                                  "(torch.export specialized it to a constant); leave batch static", out_dir)
    assert "mark_dynamic" not in err and "Dim.DYNAMIC" not in err


@pytest.mark.parametrize("out, message", [
    ("/proc/m.pt2", "output directory /proc is not writable"),
    ("{tmp}/missing/m.pt2", "output directory {tmp}/missing does not exist"),
    ("{tmp}/m.onnx", "expected a package path ending in .pt2"),
])
def test_bad_output_path(private_tmp, capsys, tmp_path, out, message):
    code, _, err = run_cli(capsys, "export", "--model", "my_ops.models:identity_conv_op_only",
                           "--out", out.format(tmp=tmp_path))
    assert_usage_error(code, err, message.format(tmp=tmp_path), tmp_path)


@pytest.mark.parametrize("extra, message", [
    (["--dynamic-batch", "8"], "expected MIN:MAX (e.g. 1:32), got '8'"),
    (["--dynamic-batch", "0:4"], "1 <= min <= max, got 0:4"),
    (["--golden", "0"], "expected golden >= 1, got 0"),
    (["--cpu-isa", "sse9"], "argument --cpu-isa: unknown cpu_isa 'sse9'"),
    (["--cpu-isa", "avx2,,avx512"], "expected one or more CPU ISA names"),
    (["--golden-inputs", "/nonexistent/cases.pt"], "--golden-inputs /nonexistent/cases.pt: no such file"),
    (["--golden-inputs", "/dev/null"], "--golden-inputs /dev/null: not a file torch.load reads"),
])
def test_bad_options(private_tmp, capsys, tmp_path, extra, message):
    code, _, err = run_cli(capsys, "export", "--model", "my_ops.models:identity_conv_op_only",
                           "--out", str(tmp_path / "m.pt2"), *extra)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content, message", [
    (b"", "is not a .pt2 package (not a zip archive)"),
    (b"garbage" * 100, "is not a .pt2 package (not a zip archive)"),
])
def test_inspect_rejects_non_packages(private_tmp, capsys, tmp_path, content, message):
    bogus = tmp_path / "bogus.pt2"
    bogus.write_bytes(content)
    code, _, err = run_cli(capsys, "inspect", str(bogus))
    assert_usage_error(code, err, message)


def test_inspect_rejects_a_zip_that_is_not_a_package(private_tmp, capsys, tmp_path):
    import zipfile
    path = tmp_path / "other.pt2"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("hello.txt", "hi")
    code, _, err = run_cli(capsys, "inspect", str(path))
    assert_usage_error(code, err, "is not an AOTInductor package")


def test_inspect_missing_file(private_tmp, capsys, tmp_path):
    code, _, err = run_cli(capsys, "inspect", str(tmp_path / "nope.pt2"))
    assert_usage_error(code, err, "nope.pt2 is not a file")


def run_process(*argv, **env):
    """The CLI as a process; TMPDIR is passed on, so a test's private_tmp covers it."""
    return subprocess.run([sys.executable, "-m", "export_tools", *argv], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env}, timeout=300)


def test_library_not_built_is_one_line(private_tmp, tmp_path):
    result = run_process("export", "--model", "my_ops.models:identity_conv_op_only", "--out",
                         str(tmp_path / "m.pt2"), IDENTITY_CONV_OPS_LIBRARY=str(tmp_path / "libmissing.so"))
    assert_usage_error(result.returncode, result.stderr, "does not name a file", tmp_path)


def test_verbose_shows_the_traceback(private_tmp, tmp_path):
    result = run_process("--verbose", "export", "--model", "no_such_module_xyz:make", "--out", str(tmp_path / "m.pt2"))
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "cannot import module" in result.stderr


def test_help_everywhere():
    for argv in ([], ["export"], ["graph"], ["inspect"], ["verify"]):
        result = run_process(*argv, "--help")
        assert result.returncode == 0 and "usage:" in result.stdout, argv


def test_export_inspect_verify_graph(capsys, tmp_path):
    out = tmp_path / "op.pt2"
    code, stdout, err = run_cli(capsys, "export", "--model", "my_ops.models:identity_conv_op_only",
                                "--out", str(out), "--golden", "2", "--metadata", "owner=tests")
    assert code == 0, err
    assert stdout.strip() == str(out) and out.is_file()
    for stage in ("eager", "export", "compile (native)", "package", "verify"):
        assert f"export-tools: {stage} done in " in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["op.pt2"]

    code, stdout, _ = run_cli(capsys, "inspect", str(out))
    assert code == 0 and "custom op    my_ops::identity_conv_op  <- libidentity_conv_ops.so" in stdout
    assert "metadata     owner = tests" in stdout
    code, stdout, _ = run_cli(capsys, "inspect", "--json", str(out))
    assert code == 0 and json.loads(stdout)["golden"]["count"] == 2

    code, stdout, _ = run_cli(capsys, "-q", "verify", str(out))
    assert code == 0 and stdout.count("ok ") == 2

    code, stdout, _ = run_cli(capsys, "-q", "graph", "--model", "my_ops.models:identity_conv_net")
    assert code == 0 and "call_torchbind" in stdout and "my_ops.identity_conv_op" in stdout


def test_quiet_prints_no_progress(capsys, tmp_path, user_module):
    code, _, err = run_cli(capsys, "-q", "export", "--model", f"{user_module}:batch_four", "--out",
                           str(tmp_path / "m.pt2"), "--dynamic-batch", "1:32")
    assert code == 2 and "done in" not in err and "export ..." not in err


def test_compare_runs_the_package_and_the_eager_model_on_the_same_inputs(capsys, tmp_path, exported, monkeypatch):
    """`compare`: each variant this machine runs against the factory's eager model, per output, on the cases given
    (or the example); a model that computes something else fails with exit 1; bad inputs are one-line errors."""
    from export_tools import cpu, read_spec

    path, _, _ = exported("net_dynamic")
    here = [v["isa"] for v in read_spec(path)["variants"] if not cpu.runs_here(v["arch"], v["cpu_features"])]
    torch.save(torch.randn(3, 3, 32, 32), tmp_path / "x.pt")
    torch.save([torch.randn(5, 3, 32, 32)], tmp_path / "list.pt")
    model = ("--model", "my_ops.models:identity_conv_net")
    code, out, err = run_cli(capsys, "-q", "compare", str(path), *model, "--input", str(tmp_path / "x.pt"),
                             "--input", str(tmp_path / "list.pt"))
    assert code == 0, err
    lines = out.splitlines()
    assert [(line.split()[:3]) for line in lines] == [["ok", v, "case"] for v in here for _ in range(2)], out
    assert all("float32" in line and "max err/scale" in line for line in lines), out
    assert "3x8x32x32" in lines[0] and "5x8x32x32" in lines[1], out
    code, out, _ = run_cli(capsys, "-q", "compare", str(path), *model)  # the factory's example
    assert code == 0 and len(out.splitlines()) == len(here), out

    (tmp_path / "shifted.py").write_text(
        "import torch\nfrom my_ops import models\n\n"
        "class Shifted(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.net, _ = models.identity_conv_net()\n\n"
        "    def forward(self, x):\n        return self.net(x) + 0.5\n\n"
        "def factory():\n    return Shifted(), models.identity_conv_net()[1]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, _ = run_cli(capsys, "-q", "compare", str(path), "--model", "shifted:factory")
    assert code == 1 and all(line.startswith("FAIL") and "max abs 0.5" in line for line in out.splitlines()), out

    torch.save("text", tmp_path / "text.pt")
    torch.save([torch.randn(1, 3, 32, 32)] * 2, tmp_path / "two.pt")
    for given, message in ((tmp_path / "absent.pt", "no such file"),
                           (tmp_path / "text.pt", "expected torch.save of a tensor or of a list of tensors"),
                           (tmp_path / "two.pt", "case 0: 2 inputs, the package takes 1 (x)")):
        code, _, err = run_cli(capsys, "-q", "compare", str(path), *model, "--input", str(given))
        assert_usage_error(code, err, message)


def test_verify_exits_1_when_a_golden_case_does_not_match(capsys, tmp_path, exported):
    """A package whose golden outputs were changed after export: `verify` reports the case and exits 1."""
    from export_tools import golden
    from export_tools.layout import GOLDEN_RECORD
    from export_tools.package import read_golden

    path, _, _ = exported("op_static")
    cases = read_golden(path)
    cases[2].outputs[0] = cases[2].outputs[0] + 1.0
    wrong = copy_package(path, tmp_path / "op_static.pt2", records={GOLDEN_RECORD: golden.dumps(cases)})
    code, stdout, _ = run_cli(capsys, "-q", "verify", str(wrong))
    assert code == 1
    lines = stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["ok", "ok", "FAIL", "ok"], stdout
    assert "max abs 1" in lines[2], stdout


def test_verify_refuses_a_library_that_registers_another_schema(capsys, tmp_path, exported):
    """The stale-library case: the package was exported against one schema, the loaded library registers another."""
    path, _, _ = exported("op_static")
    stale = copy_package(path, tmp_path / "op_static.pt2", lambda s: {**s, "custom_ops": [
        {**s["custom_ops"][0], "schema": "my_ops::identity_conv_op(Tensor x, int k) -> Tensor"}]})
    code, _, err = run_cli(capsys, "-q", "verify", str(stale))
    assert code == 2
    assert ("op my_ops::identity_conv_op: the package was exported against 'my_ops::identity_conv_op(Tensor x, int k) "
            "-> Tensor', the loaded library registers 'my_ops::identity_conv_op(Tensor x) -> Tensor'") in err, err
    code, _, _ = run_cli(capsys, "-q", "verify", str(path))
    assert code == 0


def test_verify_names_a_library_that_is_not_loaded(capsys, tmp_path, exported):
    path, _, _ = exported("op_static")
    other = copy_package(path, tmp_path / "op_static.pt2", lambda s: {**s, "custom_ops": s["custom_ops"] + [
        {"name": "other_ops::thing", "overload": "", "namespace": "other_ops", "schema": "other_ops::thing(Tensor x) -> Tensor",
         "library": "libother_ops.so"}]})
    code, _, err = run_cli(capsys, "-q", "verify", str(other))
    assert code == 2
    assert "op other_ops::thing (from libother_ops.so) is not registered" in err, err


@pytest.mark.parametrize("name, message", [
    ("scale2", "expected NAMESPACE::OP in lower case"),
    ("Acme::Scale", "expected NAMESPACE::OP in lower case"),
    ("acme::", "expected NAMESPACE::OP in lower case"),
    ("aten::scale2", "namespace 'aten' is torch's own"),
    ("prims::scale2", "namespace 'prims' is torch's own"),
])
def test_new_op_refuses_bad_names(capsys, tmp_path, name, message):
    code, _, err = run_cli(capsys, "new-op", name, "--out", str(tmp_path / "proj"))
    assert code == 2 and message in err, err
    assert not (tmp_path / "proj").exists()


def test_new_op_writes_the_project_and_never_over_a_users_files(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "new-op", "acme::scale2", "--out", str(tmp_path / "proj"))
    assert code == 0
    written = sorted(str(p.relative_to(tmp_path / "proj")) for p in (tmp_path / "proj").rglob("*") if p.is_file())
    assert written == ["CMakeLists.txt", "README.md", "csrc/scale2.cpp", "csrc/scale2_cuda.cu",
                       "csrc/scale2_kernel.h", "csrc/scale2_lite.cpp", "python/acme_ops/__init__.py",
                       "tests/test_scale2.py"]
    assert 'm.def("scale2(Tensor x) -> Tensor")' in (tmp_path / "proj/csrc/scale2.cpp").read_text()
    before = (tmp_path / "proj/csrc/scale2.cpp").read_text()
    code, _, err = run_cli(capsys, "new-op", "acme::other", "--out", str(tmp_path / "proj"))
    assert code == 2 and "exists and is not an empty directory" in err
    assert (tmp_path / "proj/csrc/scale2.cpp").read_text() == before


def test_quiet_and_verbose_may_follow_the_subcommand(capsys, exported):
    path, _, _ = exported("op_static")
    for argv in (["-q", "inspect", str(path)], ["inspect", str(path), "-q"], ["inspect", "-v", str(path)]):
        code, out, _ = run_cli(capsys, *argv)
        assert code == 0 and "package      op_static" in out, argv


def test_a_dim_that_must_be_a_multiple_gets_torchs_fix_in_this_clis_syntax(private_tmp, capsys, tmp_path):
    code, _, err = run_cli(capsys, "export", "--model", "zoo:unet", "--out", str(tmp_path / "u.pt2"),
                           "--dynamic", "image.2=h:32:256", "--dynamic", "image.3=w:32:256")
    assert code == 2 and "Traceback" not in err, err
    assert "h must be 8 * a size in 4..32" in err, err
    assert "Export with --dynamic image.2=8*h:32:256 --dynamic image.3=8*w:32:256" in err, err
    assert 'h = 8 * Dim("h", min=4, max=32)' in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("item, message", [
    ("image.2=8*h:1:7", "no multiple of 8 lies between 1 and 7"),
    ("image.2=0*h:8:64", "expected K >= 1 in K*NAME"),
    ("image.2=8*h:", "INPUT.DIM=K*NAME:MIN:MAX"),
])
def test_bad_multiples(private_tmp, capsys, tmp_path, item, message):
    code, _, err = run_cli(capsys, "export", "--model", "zoo:unet", "--out", str(tmp_path / "u.pt2"), "--dynamic", item)
    assert code == 2 and message in err and "Traceback" not in err, err
