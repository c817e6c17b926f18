"""Golden checks that can fail: the tolerance scales with each output's magnitude, degenerate outputs are refused at
export, and negative controls (golden outputs scaled by 1.01 or zeroed) fail both `pt2run verify` (C++) and
`export-tools verify` (Python) - also for a model whose outputs are ~1e-9."""

import logging

import pytest
import torch

from export_tools import ExportError, export_package, read_golden
from export_tools import golden
from export_tools.__main__ import main
from export_tools.layout import GOLDEN_RECORD
from packages import copy_package, pt2run


class Tiny(torch.nn.Module):
    """Outputs of ~1e-9: any fixed atol of 1e-5 would pass every wrong answer."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x) * 1e-9


class Zero(torch.nn.Module):
    def forward(self, x):
        return x * 0.0, x.sum(dim=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.pt2"
    return export_package(Tiny().eval(), (torch.randn(2, 3, 8, 8),), path, golden=3)


def doctored(path, out_dir, edit, name):
    """A copy of the package (same file name: the archive's root is named after it) with edited golden outputs."""
    cases = read_golden(path)
    for c in cases:
        c.outputs = [edit(t) for t in c.outputs]
    (out_dir / name).mkdir(parents=True)
    return copy_package(path, out_dir / name / path.name, records={GOLDEN_RECORD: golden.dumps(cases)})


def python_verify(path, capsys):
    code = main(["-q", "verify", str(path)])
    return code, capsys.readouterr().out


def test_tolerance_scales_with_the_output():
    big, small = torch.full((4,), 1000.0), torch.full((4,), 1e-9)
    # an error of 1e-6 relative to the output passes at any magnitude; 1e-3 fails at any magnitude
    for e in (big, small):
        assert golden.compare([e * (1 + 1e-6)], [e])[0]
        assert not golden.compare([e * (1 + 1e-3)], [e])[0]
    # elements far below the output's magnitude take the output's absolute slack (1e-5 x 1000 here)
    mixed = torch.tensor([1000.0, 1e-3])
    assert golden.compare([mixed + torch.tensor([0.0, 5e-3])], [mixed])[0]
    assert not golden.compare([mixed + torch.tensor([0.0, 2e-2])], [mixed])[0]
    # the magnitude is the expected's or the actual's: values where zeros are expected fail, however small
    assert not golden.compare([torch.full((3,), 1e-12)], [torch.zeros(3)])[0]
    assert golden.compare([torch.zeros(3)], [torch.zeros(3)])[0]
    # ... unless the output was exported as degenerate: then the fixed atol
    assert golden.compare([torch.full((3,), 1e-6)], [torch.zeros(3)], degenerate={0})[0]
    assert golden.magnitude(torch.tensor([-3.0, float("nan"), 2.0]), torch.tensor([1.0, 4.0, 0.0])) == 4.0
    assert golden.effective_atol(4.0, 1e-5, 1e-5) == pytest.approx(4e-5)
    assert golden.effective_atol(4.0, 1e-5, None) == 1e-5
    # a fixed absolute atol when asked for one: (rtol, atol) without atol_rel
    assert golden.compare([small * 2], [small], {"float32": (1.3e-6, 1e-5)})[0]


def test_the_scaled_error_is_reported():
    passed, max_abs, scaled, _ = golden.compare([torch.tensor([2.0, 1.001])], [torch.tensor([2.0, 1.0])])
    assert not passed and max_abs == pytest.approx(1e-3, rel=1e-3) and scaled == pytest.approx(5e-4, rel=1e-3)


@pytest.mark.parametrize("edit, name", [(lambda t: t * 1.01, "scaled"), (torch.zeros_like, "zeroed")])
def test_negative_controls_fail_both_verifiers(tiny, exported, tmp_path, capsys, edit, name):
    net, _, _ = exported("net_dynamic")
    for path in (tiny, net):
        wrong = doctored(path, tmp_path / path.stem, edit, name)
        result = pt2run("verify", wrong)
        assert result.returncode == 1, (path, result.stdout, result.stderr)
        assert "FAIL" in result.stdout and "max err/scale" in result.stdout
        code, out = python_verify(wrong, capsys)
        assert code == 1 and "FAIL" in out, out
    # the packages themselves pass: the controls fail for the edit, not for the rule
    for path in (tiny, net):
        assert pt2run("verify", path).returncode == 0
        assert python_verify(path, capsys)[0] == 0


def test_half_precision_outputs_zeroed_fail(exported, tmp_path, capsys):
    path, _, _ = exported("net_bf16")
    wrong = doctored(path, tmp_path, torch.zeros_like, "zeroed")
    assert pt2run("verify", wrong).returncode == 1
    assert python_verify(wrong, capsys)[0] == 1


def test_the_spec_records_the_rule(tiny):
    from export_tools import read_spec
    assert read_spec(tiny)["golden"]["tolerances"] == {"float32": {"rtol": 1.3e-6, "atol": 1e-5, "atol_rel": 1e-5}}


def test_degenerate_outputs_are_refused_unless_allowed(tmp_path):
    with pytest.raises(ExportError) as err:
        export_package(Zero(), (torch.randn(2, 3),), tmp_path / "zero.pt2", golden=2)
    assert "cannot check output 0 (all zero in every golden case)" in str(err.value)
    assert "--allow-degenerate-golden" in str(err.value) and list(tmp_path.iterdir()) == []
    warnings = []
    handler = logging.Handler()
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("export_tools").addHandler(handler)
    try:
        path = export_package(Zero(), (torch.randn(2, 3),), tmp_path / "zero.pt2", golden=2,
                              allow_degenerate_golden=True)
    finally:
        logging.getLogger("export_tools").removeHandler(handler)
    assert path.is_file() and "golden cases cannot check output 0 (all zero in every golden case)" in warnings
    from export_tools import read_spec
    assert read_spec(path)["golden"]["degenerate_outputs"] == [0]
    assert pt2run("verify", path).returncode == 0


def test_degenerate_detection():
    case = lambda *outs: golden.Case("c", [], list(outs))  # noqa: E731
    assert golden.degenerate_outputs([case(torch.zeros(3), torch.ones(3), torch.tensor([1.0, 2.0]))] * 2) == {
        0: "output 0 (all zero in every golden case)", 1: "output 1 (constant in every golden case)"}
    # one varying case is enough; integer outputs are not judged
    assert golden.degenerate_outputs([case(torch.zeros(3)), case(torch.tensor([0.0, 1.0, 0.0]))]) == {}
    assert golden.degenerate_outputs([case(torch.zeros(3, dtype=torch.int64))]) == {}
    assert golden.degenerate_outputs([case(torch.full((2,), float("nan")))]) == {
        0: "output 0 (not finite in every golden case)"}
