"""How the my_ops package finds and loads its library."""

import os
import subprocess
import sys
from pathlib import Path

import torch

import my_ops


def run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


def test_library_path_is_the_loaded_library():
    path = my_ops.library_path()
    assert path.name == "libidentity_conv_ops.so" and path.is_file()
    assert my_ops.load_library() == path  # loaded once, same answer
    assert str(path) in torch.ops.loaded_libraries
    assert hasattr(torch.ops.my_ops, "identity_conv_op")


def test_env_var_selects_the_library(tmp_path):
    copy = tmp_path / "libidentity_conv_ops.so"  # another path than the build tree's, so the choice shows
    copy.write_bytes(my_ops.library_path().read_bytes())
    result = run_python("import my_ops; print(my_ops.library_path())", IDENTITY_CONV_OPS_LIBRARY=str(copy))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(copy)


def test_env_var_naming_a_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.so"
    result = run_python("import my_ops", IDENTITY_CONV_OPS_LIBRARY=str(missing))
    assert result.returncode != 0
    assert f"IDENTITY_CONV_OPS_LIBRARY={missing} does not name a file" in result.stderr


def test_env_var_naming_a_non_library_is_a_clear_error(tmp_path):
    bogus = tmp_path / "libidentity_conv_ops.so"
    bogus.write_text("not a shared library")
    result = run_python("import my_ops", IDENTITY_CONV_OPS_LIBRARY=str(bogus))
    assert result.returncode != 0
    assert f"could not load {bogus}" in result.stderr


def test_build_tree_candidate_matches_the_torch_flavour():
    flavour = "cuda" if torch.version.cuda else "cpu"
    assert my_ops.flavour() == flavour
    repo = Path(__file__).resolve().parents[2]
    assert my_ops.candidates()[0] == repo / "build" / f"{flavour}-release" / "lib" / "libidentity_conv_ops.so"


def test_demo_runs():
    result = subprocess.run([sys.executable, "-m", "my_ops"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "output equals input: True" in result.stdout
