"""export_tools.dynamic without compiling: dynamic_shapes as torch.export takes them, the CLI's --dynamic, the
traced example, golden case sizes; and the export errors they give."""

import pytest
import torch
from torch.export import Dim

from export_tools import ExportError, export_package
from export_tools.dynamic import (DynamicShapesError, Root, case_sizes, input_names, normalize, parse_cli,
                                  trace_inputs)


class Two(torch.nn.Module):
    def forward(self, image, mask):
        return image * mask


X, M = torch.randn(2, 3, 8, 8), torch.ones(2, 1, 8, 8)


def test_input_names_are_the_forward_parameters():
    assert input_names(Two(), 2) == ["image", "mask"]

    class Star(torch.nn.Module):
        def forward(self, *args):
            return args[0]
    assert input_names(Star(), 2) == ["input0", "input1"]


def test_dynamic_shapes_by_name_tuple_or_per_dim_tuple_are_one_form():
    h = Dim("h", min=4, max=64)
    by_name = normalize(Two(), [X, M], None, {"image": {2: h}, "mask": {2: h}})
    by_position = normalize(Two(), [X, M], None, ({2: h}, (None, None, h, None)))
    assert by_name == by_position == [{2: h}, {2: h}]
    assert normalize(Two(), [X, M], None, {"image": None}) is None  # nothing dynamic: static


def test_dynamic_batch_is_a_dim_named_batch():
    dims = normalize(Two(), [X, M], (1, 8), None)
    assert [list(d) for d in dims] == [[0], [0]] and dims[0][0] is dims[1][0]
    assert (dims[0][0].__name__, dims[0][0].min, dims[0][0].max) == ("batch", 1, 8)


@pytest.mark.parametrize("kwargs, message", [
    (dict(dynamic_batch=(1, 4), dynamic_shapes={"image": {0: Dim("b")}}), "give dynamic_batch or dynamic_shapes"),
    (dict(dynamic_shapes={"img": {0: Dim("b")}}), "names 'img', which is not an input of the model (its inputs: "
                                                   "image, mask)"),
    (dict(dynamic_shapes=({0: Dim("b")},)), "dynamic_shapes has 1 entries for 2 inputs"),
    (dict(dynamic_shapes={"image": {4: Dim("b")}}), "image has no dim 4 (the example has 4 dims)"),
    (dict(dynamic_shapes={"image": {0: 3}}), "expected a torch.export.Dim for image.0, got int"),
    (dict(dynamic_shapes={"image": {2: Dim("h", min=16, max=32)}}), "example image.2 is 8, outside the range of h "
                                                                     "(16:32)"),
    (dict(dynamic_shapes={"image": {2: Dim("h", min=2, max=32)}, "mask": {2: Dim("h", min=4, max=32)}}),
     "two Dims named h with different ranges (image.2 and mask.2)"),
    (dict(dynamic_shapes={"image": (None, None)}), "dynamic_shapes for image has 2 dims, the example has 4"),
    (dict(dynamic_shapes=[[None] * 4, 5]), "expected the dynamic_shapes of mask as a dict or tuple of Dims, got int"),
    (dict(dynamic_shapes="x.0"), "expected dynamic_shapes as a tuple or a dict of input names, got str"),
])
def test_bad_dynamic_shapes_are_one_line_export_errors(tmp_path, kwargs, message):
    with pytest.raises(ExportError) as err:
        export_package(Two(), (X, M), tmp_path / "m.pt2", **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_cli_items_make_one_dim_per_name():
    shapes = parse_cli(["image.0=batch:1:8", "1.0=batch:1:8", "image.2=h:4:64"], ["image", "mask"])
    assert shapes["image"][0] is shapes["mask"][0]
    assert (shapes["image"][2].__name__, shapes["image"][2].min, shapes["image"][2].max) == ("h", 4, 64)


@pytest.mark.parametrize("items, message", [
    (["image.0"], "expected --dynamic INPUT.DIM=NAME:MIN:MAX or INPUT.DIM=K*NAME:MIN:MAX (e.g. x.0=batch:1:32, "
                  "image.2=8*h:32:256), got 'image.0'"),
    (["image.0=batch:1"], "expected --dynamic INPUT.DIM=NAME:MIN:MAX"),
    (["img.0=batch:1:8"], "the model has no input img (its inputs: image, mask)"),
    (["2.0=batch:1:8"], "the model has 2 inputs"),
    (["image.0=batch:8:1"], "expected MIN <= MAX"),
    (["image.0=batch:4:4"], "a range of one size is a static dim"),
    (["image.0=batch:1:8", "mask.0=batch:1:9"], "batch was given the range 1:8 before"),
    (["image.0=batch:1:8", "image.0=b:1:8"], "image.0 was made dynamic before"),
])
def test_bad_cli_items(items, message):
    with pytest.raises(DynamicShapesError) as err:
        parse_cli(items, ["image", "mask"])
    assert message in str(err.value)


def test_size_one_examples_are_traced_at_two():
    b, h = Dim("b", min=1, max=8), Dim("h", min=1, max=1 << 20)
    x, m = torch.randn(1, 3, 1, 5), torch.randn(1, 1, 1, 5)
    traced = trace_inputs([x, m], [{0: b, 2: h}, {0: b}])
    assert [list(t.shape) for t in traced] == [[2, 3, 2, 5], [2, 1, 1, 5]]
    assert torch.equal(traced[0][1, :, 1], x[0, :, 0])  # the example repeated, not made up
    assert trace_inputs([X], [{0: b}])[0] is X


def test_case_sizes_cover_every_corner():
    rs = [Root("batch", 1, 8, 2), Root("h", 4, 64, 8)]
    cases = case_sizes(rs, 3)
    assert cases[:3] == [("min", {"batch": 1, "h": 4}), ("max_batch", {"batch": 8, "h": 4}),
                         ("max_h", {"batch": 1, "h": 64})]
    assert [n for n, _ in cases[3:]] == ["between_0"]  # at least one between, even past the count asked for
    between = cases[3][1]
    assert 1 < between["batch"] < 8 and 4 < between["h"] < 64
    assert [n for n, _ in case_sizes(rs, 6)] == ["min", "max_batch", "max_h", "between_0", "between_1", "between_2"]
    assert case_sizes([Root("seq", 2, None, 10)], 2)[1] == ("max", {"seq": 20})  # unbounded: twice the example
    assert case_sizes([], 2) == [("random_0", {}), ("random_1", {})]


def test_dim_hints_export_with_names_from_the_input(tmp_path):
    """Dim.AUTO / Dim.DYNAMIC carry no name: the spec names them <input>_<dim>; an unbounded range's golden case
    takes twice the example."""
    from export_tools import read_golden, read_spec
    from packages import pt2run

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2 + x.sum(dim=1, keepdim=True)

    path = export_package(M(), (torch.randn(3, 5),), tmp_path / "hints.pt2", golden=3,
                          dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.DYNAMIC(min=2, max=9)}})
    dims = read_spec(path)["inputs"][0]["dynamic_dims"]
    assert [(d["name"], d["min"], d["max"]) for d in dims] == [("x_0", 2, None), ("x_1", 2, 9)]
    shapes = {c.name: list(c.inputs[0].shape) for c in read_golden(path)}
    assert shapes["max_x_0_x_0=6_x_1=2"] == [6, 2] and shapes["max_x_1_x_0=2_x_1=9"] == [2, 9]
    assert pt2run("verify", path).returncode == 0
