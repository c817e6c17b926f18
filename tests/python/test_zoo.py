"""The model zoo (tests/python/zoo.py) with dynamic dims: exported once per session, verified by pt2run (C++), run
through `pt2run run` at sizes inside every range and compared with eager."""

import json
import subprocess

import pytest
import torch

import zoo
from packages import pt2run, pt2run_path
from export_tools import export_package, read_golden, read_spec
from export_tools.golden import compare

@pytest.fixture(scope="session")
def zoo_package(tmp_path_factory):
    """zoo_package(name) -> (path, model, example_inputs), each exported once."""
    out = tmp_path_factory.mktemp("zoo")
    cache = {}

    def get(name):
        if name not in cache:
            factory, shapes, *given = zoo.RECIPES[name]
            model, inputs = factory()
            # the encoder with lite variants too: a transformer with a padding mask and token ids in lite
            path = export_package(model, inputs, out / f"{name}.pt2", dynamic_shapes=shapes(), golden=5,
                                  golden_inputs=given[0]() if given else (), lite=name == "encoder")
            cache[name] = (path, model, inputs)
        return cache[name]

    return get


def run_eager(model, inputs):
    with torch.no_grad():
        out = model(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def pt2run_lite(*args):
    """pt2run on the lite library, beside the full one"""
    return subprocess.run([str(pt2run_path().parent / "pt2run_lite"), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def run_pt2run(path, inputs, tmp_path, run=pt2run):
    src, dst = tmp_path / "in.pt", tmp_path / "out.pt"
    torch.save(list(inputs), src)
    result = run("run", path, "--input", src, "--output", dst)
    assert result.returncode == 0, result.stderr
    out = torch.load(dst)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def dims(spec, which="inputs"):
    return {(e["name"], d["dim"]): d for e in spec[which] for d in e["dynamic_dims"]}


def assert_matches_eager(path, model, inputs, tmp_path, run=pt2run):
    """pt2run's outputs vs eager's, by the golden cases' own rule."""
    actual, expected = run_pt2run(path, inputs, tmp_path, run), run_eager(model, inputs)
    passed, _, _, reason = compare(actual, expected)
    assert passed, reason


@pytest.mark.parametrize("name", ["conv_net", "conv_net_fp16", "conv_net_bf16"])
def test_conv_net_with_dynamic_batch_height_and_width(zoo_package, name, tmp_path):
    path, model, (image,) = zoo_package(name)
    spec = read_spec(path)
    d = dims(spec)
    assert {k: (v["name"], v["min"], v["max"]) for k, v in d.items()} == {
        ("image", 0): ("batch", 1, 8), ("image", 2): ("h", 8, 64), ("image", 3): ("w", 8, 64)}
    names = spec["golden"]["names"]
    assert names[0] == "example" and image.shape[0] == 1  # a batch-1 example exported with a dynamic batch
    assert "min_batch=1_h=8_w=8" in names and "max_h_batch=1_h=64_w=8" in names and "max_batch_batch=8_h=8_w=8" in names
    verify = pt2run("verify", path)
    assert verify.returncode == 0, verify.stderr
    for shape in [(1, 3, 8, 8), (3, 3, 17, 50), (8, 3, 64, 64), (2, 3, 33, 9)]:
        assert_matches_eager(path, model, (torch.randn(shape).to(image.dtype),), tmp_path)
    bad = pt2run("run", path, "--input", _saved(tmp_path, [torch.randn(2, 3, 65, 16).to(image.dtype)]),
                 "--output", tmp_path / "x.pt")
    assert bad.returncode == 5 and "dim 2 (h) must be in 8..64, got 65" in bad.stderr, bad.stderr


def test_transformer_encoder_with_dynamic_batch_and_sequence(zoo_package, tmp_path):
    path, model, _ = zoo_package("encoder")
    spec = read_spec(path)
    assert {k: v["name"] for k, v in dims(spec).items()} == {
        ("tokens", 0): "batch", ("tokens", 1): "seq", ("padding", 0): "batch", ("padding", 1): "seq"}
    assert dims(spec)[("tokens", 1)]["min"] == 2 and dims(spec)[("tokens", 1)]["max"] == 16
    # a standard padded encoder from a batch-1 example: the caller's case first, then generated masks that keep
    # the example's padding pattern (coin-flip masks padded whole rows: NaN in eager, and the export failed)
    names = spec["golden"]["names"]
    assert names[:2] == ["example", "given_0"] and len(names) >= 5, names
    golden = read_golden(path)
    assert torch.equal(golden[1].inputs[1], zoo.encoder_golden()[0][1])
    for case in golden:
        assert not case.inputs[1].all(dim=1).any(), case.name  # no row all padding
        assert torch.isfinite(case.outputs[0]).all(), case.name
    verify = pt2run("verify", path)
    assert verify.returncode == 0, verify.stderr
    for batch, seq in [(1, 2), (4, 16), (3, 9)]:
        tokens = torch.randint(0, 100, (batch, seq))
        padding = torch.rand(batch, seq) > 0.6
        padding[:, 0] = False  # a row of padding only is no input (eager gives NaN)
        assert_matches_eager(path, model, (tokens, padding), tmp_path)
        assert_matches_eager(path, model, (tokens, padding), tmp_path, run=pt2run_lite)
    mismatch = pt2run("run", path, "--input", _saved(tmp_path, [torch.randint(0, 100, (2, 5)),
                                                                 torch.zeros(2, 6, dtype=torch.bool)]),
                      "--output", tmp_path / "x.pt")
    assert mismatch.returncode == 5 and "(seq) is 6, but input 0 (tokens) has seq = 5" in mismatch.stderr, mismatch.stderr
    # token ids index the embedding's 100 rows: the spec says so, and a run refuses one outside (the model's own
    # check fails inside a parallel loop, which aborted the process)
    assert spec["inputs"][0]["values"] == {"min": 0, "max": 99, "indexes": "aten.embedding of 100 rows"}
    assert "values" not in spec["inputs"][1]
    for bad_token, run in ((100, pt2run), (-1, pt2run), (2**40, pt2run), (100, pt2run_lite), (-7, pt2run_lite)):
        tokens = torch.randint(0, 100, (2, 5))
        tokens[1, 3] = bad_token
        outside = run("run", path, "--input", _saved(tmp_path, [tokens, torch.zeros(2, 5, dtype=torch.bool)]),
                      "--output", tmp_path / "x.pt")
        assert outside.returncode == 5, outside.stderr
        assert f"input 0 (tokens): element 8 is {bad_token}, outside 0..99 (it indexes aten.embedding of 100 rows)" \
            in outside.stderr, outside.stderr


def test_derived_dims_and_two_outputs(zoo_package, tmp_path):
    path, model, _ = zoo_package("two_scales")
    spec = read_spec(path)
    fine_h = dims(spec)[("fine", 2)]
    assert (fine_h["name"], fine_h["of"], fine_h["scale"], fine_h["offset"], fine_h["min"], fine_h["max"]) == (
        "2*h", "h", 2, 0, 4, 40)
    assert [o["name"] for o in spec["outputs"]] == ["output_0", "output_1"]
    verify = pt2run("verify", path)
    assert verify.returncode == 0, verify.stderr
    assert_matches_eager(path, model, (torch.randn(3, 4, 7, 2), torch.randn(3, 4, 14, 4)), tmp_path)
    info = pt2run("info", path)
    assert "2*h[4..40]" in info.stdout, info.stdout
    for fine, message in [((3, 4, 15, 4), "dim 2 must be 2*h for a whole h, got 15"),
                          ((3, 4, 16, 4), "dim 2 (2*h) makes h = 8, but input 0 (coarse) has h = 7")]:
        bad = pt2run("run", path, "--input", _saved(tmp_path, [torch.randn(3, 4, 7, 2), torch.randn(*fine)]),
                     "--output", tmp_path / "x.pt")
        assert bad.returncode == 5 and message in bad.stderr, bad.stderr


def test_golden_cases_take_every_corner(zoo_package):
    path, _, _ = zoo_package("two_scales")
    cases = {c.name: c for c in read_golden(path)}
    shapes = {name: [list(t.shape) for t in c.inputs] for name, c in cases.items()}
    assert shapes["min_batch=1_h=2_w=2"] == [[1, 4, 2, 2], [1, 4, 4, 4]]
    assert shapes["max_w_batch=1_h=2_w=20"] == [[1, 4, 2, 20], [1, 4, 4, 40]]
    assert shapes["max_batch_batch=6_h=2_w=2"] == [[6, 4, 2, 2], [6, 4, 4, 4]]
    assert any(n.startswith("between_") for n in shapes)


def _saved(tmp_path, tensors):
    path = tmp_path / "bad.pt"
    torch.save(tensors, path)
    return path


def test_pt2run_info_json_has_the_derived_dim(zoo_package):
    path, _, _ = zoo_package("two_scales")
    info = json.loads(pt2run("info", path, "--json").stdout)
    fine = next(e for e in info["inputs"] if e["name"] == "fine")
    assert {"dim": 3, "name": "2*w", "expr": "2*w", "of": "w", "scale": 2, "offset": 0, "min": 4, "max": 40} in \
        fine["dynamic_dims"]


def test_a_unet_with_multiple_of_8_sizes_exports_from_the_cli(capsys, tmp_path):
    """zoo.UNetish runs only H and W that are multiples of 8: --dynamic K*NAME (test_cli checks the error that
    suggests it)."""
    from export_tools.__main__ import main

    code = main(["-q", "export", "--model", "zoo:unet", "--out", str(tmp_path / "u.pt2"),
                 "--dynamic", "image.2=8*h:32:256", "--dynamic", "image.3=8*w:30:250"])
    err = capsys.readouterr().err
    assert code == 0, err
    dims = {d["dim"]: d for d in read_spec(tmp_path / "u.pt2")["inputs"][0]["dynamic_dims"]}
    assert (dims[2]["name"], dims[2]["of"], dims[2]["scale"], dims[2]["min"], dims[2]["max"]) == ("8*h", "h", 8, 32, 256)
    assert (dims[3]["min"], dims[3]["max"]) == (32, 248)  # the multiples of 8 within 30..250
