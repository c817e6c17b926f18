"""export_tools.compat: which package loads under which torch (the runtime's compat.cpp has the same rule; its
gtests check it on packages), and -march on every supported torch."""

import pytest
import torch

from export_tools import ExportError, compat, load_package, read_spec
from packages import copy_package


def test_versions_parse_with_and_without_local_parts():
    assert compat.parse("2.11.0+cu130") == (2, 11, 0)
    assert compat.parse("2.13.0") == (2, 13, 0)
    assert compat.parse("2.16.0a0+git1234") == (2, 16, 0)
    assert compat.release("2.14.1+cu130") == "2.14.1"
    with pytest.raises(ValueError, match="not a torch version"):
        compat.parse("two")


@pytest.mark.parametrize("made, here, loads", [
    ("2.11.0", "2.11.0", True), ("2.11.0+cu130", "2.15.0", True), ("2.13.2", "2.13.0", True),
    ("2.14.1", "2.13.0+cpu", False), ("3.0.0", "2.15.0", False), ("2.10.0", "2.13.0", False),
])
def test_a_package_loads_under_its_torch_or_a_newer_one_in_the_range(made, here, loads):
    why = compat.why_not_loadable(made, here)
    assert (why is None) == loads, why
    if not loads:
        assert made in why and here in why and "\n" not in why


def test_the_supported_range_is_2_11_to_2_15():
    assert compat.supported("2.11.0") and compat.supported("2.15.0+cu130")
    assert not compat.supported("2.10.0") and not compat.supported("2.16.0")


def test_this_torch_is_in_the_range():
    assert compat.supported(), f"torch {torch.__version__} is outside {compat.OLDEST}..{compat.NEWEST}"


def test_march_is_patched_and_restored():
    before = compat.march()
    with compat.patch_march("x86-64-v3"):
        assert compat.march() == "x86-64-v3"
        assert compat.arch_cflags("g++", "x86_64") == ["-march=x86-64-v3"]
        with compat.patch_march(""):
            assert compat.arch_cflags("g++", "x86_64") == []
    assert compat.march() == before


def test_python_refuses_a_package_from_a_newer_torch(exported, tmp_path):
    from torch.export.pt2_archive._package import PT2ArchiveReader

    path, _, _ = exported("op_static")
    major, minor, _ = compat.parse(torch.__version__)
    newer = f"{major}.{minor + 1}.0"
    dst = tmp_path / path.name
    copy_package(path, dst, edit_spec=lambda spec: {**spec, "torch_version": newer})
    assert read_spec(dst)["torch_version"] == newer
    with pytest.raises(ExportError, match=f"exported with torch {newer}, newer than this torch"):
        load_package(dst)
    # every variant's model folder has the placeholder torch 2.11's loader finds the metadata by
    names = set(PT2ArchiveReader(str(path)).get_file_names())
    for v in read_spec(path)["variants"]:
        assert v["record"][:-3] + ".cpp" in names
