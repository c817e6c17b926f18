"""Compact packages: what loading does not need stays out (generated sources, the model library's debug info),
golden cases are capped by size, and `inspect` breaks the size down."""

import zipfile

import pytest
import torch

from export_tools import ExportError, export_package, read_golden, read_spec
from export_tools.__main__ import main
from export_tools.package import package_sizes
from packages import pt2run


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def test_no_sources_and_no_debug_info(exported):
    path, _, _ = exported("net_dynamic")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        # no generated sources: only the empty placeholder of each library that torch 2.11's loader wants
        sources = [n for n in names if n.endswith(".cpp")]
        assert sources and all(zf.getinfo(n).file_size == 0 for n in sources), sources
        libraries = [n for n in names if n.endswith(".so")]
        assert len(libraries) == 3
        for n in libraries:
            data = zf.read(n)
            assert data[:4] == b"\x7fELF" and b".debug_info" not in data and b".symtab" in data, n
    assert pt2run("verify", path).returncode == 0  # AOTInductor loads it as it is


def test_inspect_breaks_the_size_down(exported, capsys):
    path, _, _ = exported("net_dynamic")
    sizes = package_sizes(path)
    total = sizes.pop("total (file)")
    assert set(sizes) == {"model library (avx2)", "model library (avx512)", "model library (default)",
                          "golden cases", "constants and custom objects", "metadata and other records"}
    assert 0.9 * total < sum(sizes.values()) <= total  # the rest: zip headers
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"size         {total / (1 << 20):.2f} MiB" in out and "golden cases" in out and "model library (avx512)" in out


def test_golden_cases_are_capped_by_size(tmp_path):
    x = torch.randn(2, 3, 8, 8)  # one case: 2*3*8*8*4 + 2*4*8*8*4 bytes = 3.5 KiB
    path = export_package(Small().eval(), (x,), tmp_path / "small.pt2", golden=4, golden_max_mb=8 / 1024)
    spec = read_spec(path)
    assert spec["golden"]["names"] == ["example", "random_0"] and spec["golden"]["left_out"] == ["random_1", "random_2"]
    assert [c.name for c in read_golden(path)] == ["example", "random_0"]
    assert pt2run("verify", path).returncode == 0


@pytest.mark.parametrize("value", [0, -1, "8", True])
def test_bad_golden_cap(tmp_path, value):
    with pytest.raises(ExportError) as err:
        export_package(Small(), (torch.randn(1, 3, 4, 4),), tmp_path / "m.pt2", golden_max_mb=value)
    assert "expected golden_max_mb as a number of MiB > 0 (or None)" in str(err.value)
