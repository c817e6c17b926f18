"""Depthwise convolutions as one call of pt2rt's kernel (export_tools.convolutions, libpt2rt_kernels.so's
pt2rt::depthwise_conv2d): the kernel against torch's convolution, the graph rewrite against the eager model, without
compiling (test_export.py and test_lite.py compile packages with depthwise convolutions)."""

import logging
import re

import pytest
import torch

from export_tools import convolutions, libraries, recurrent

# channels, height, width, kh, kw, stride, padding, dilation, batch
GEOMETRIES = [
    (16, 112, 112, 3, 3, (2, 2), (1, 1), (1, 1), 1),    # MobileNet's first
    (72, 28, 28, 5, 5, (1, 1), (2, 2), (1, 1), 2),
    (40, 9, 11, 3, 5, (1, 2), (1, 2), (1, 1), 1),       # non-square everything
    (13, 9, 9, 3, 3, (1, 1), (2, 2), (2, 2), 3),        # channels past whole vectors (AVX2 and AVX-512)
    (24, 6, 6, 3, 3, (3, 3), (0, 0), (1, 1), 1),        # no padding, stride past the kernel
    (16, 5, 5, 3, 3, (1, 1), (5, 5), (2, 2), 1),        # padding wider than the dilated kernel: bias alone outside
    (33, 7, 7, 5, 5, (1, 1), (2, 2), (1, 1), 2),        # 7 wide: more border than inside
    (8, 1, 1, 3, 3, (1, 1), (1, 1), (1, 1), 1),         # one pixel
    (48, 3, 17, 1, 7, (1, 1), (0, 3), (1, 1), 1),       # a row filter
    (2, 4, 4, 2, 2, (1, 1), (0, 0), (1, 1), 2),         # even kernel, 2 channels
    # the slid forms (3 and 5 taps a row, stride 1 and 2): blocks of 8, 4 and 1-3 pixels at and between the borders,
    # channels past whole vectors
    (21, 13, 13, 3, 3, (1, 1), (1, 1), (1, 1), 1),
    (9, 6, 22, 5, 5, (1, 1), (2, 2), (1, 1), 2),
    (37, 10, 19, 3, 3, (2, 2), (1, 1), (1, 1), 1),
    (21, 11, 14, 5, 5, (2, 2), (2, 2), (1, 1), 1),
    (16, 5, 12, 3, 3, (1, 1), (0, 0), (1, 1), 1),       # no padding: every block inside
    (8, 4, 4, 3, 3, (1, 1), (3, 3), (1, 1), 1),         # padding wider than the kernel: bias alone at the ends
    (24, 9, 12, 3, 3, (1, 1), (2, 1), (2, 1), 1),       # dilated down the image only: a slid row all the same
]


@pytest.fixture(scope="module", autouse=True)
def kernels():
    path = recurrent.find_library()
    assert path is not None, f"{recurrent.LIBRARY_NAME} not found: build first or set {recurrent.ENV_VAR}"
    libraries.load_ops_library(path)
    assert recurrent.load_kernels()


def conv_and_kernel(geometry, x=None, bias=True, seed=0):
    c, h, w, kh, kw, stride, padding, dilation, n = geometry
    torch.manual_seed(seed)
    conv = torch.nn.Conv2d(c, c, (kh, kw), stride, padding, dilation, groups=c, bias=bias).eval()
    x = torch.randn(n, c, h, w) if x is None else x
    taps = conv.weight.detach().view(c, kh * kw).t().contiguous().view(kh, kw, c)
    with torch.no_grad():
        expected = conv(x)
        got = torch.ops.pt2rt.depthwise_conv2d(x, taps, conv.bias, list(stride), list(padding), list(dilation))
    return expected, got


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[:5])) + f"-s{g[5][0]}d{g[7][0]}")
def test_the_kernel_gives_torchs_answer(geometry):
    for layout in (torch.contiguous_format, torch.channels_last):
        c, h, w, *_, n = geometry
        x = torch.randn(n, c, h, w).contiguous(memory_format=layout)
        for bias in (True, False):
            expected, got = conv_and_kernel(geometry, x, bias)
            assert got.shape == expected.shape
            assert got.is_contiguous(memory_format=torch.channels_last), "the op returns channels-last"
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


F = torch.nn.functional
ACTIVATIONS = {"none": lambda y: y, "relu": torch.relu, "relu6": F.relu6, "hardswish": F.hardswish,
               "hardsigmoid": F.hardsigmoid, "silu": F.silu, "sigmoid": torch.sigmoid}


def act_and_kernel(geometry, activation, x, seed=0):
    c, h, w, kh, kw, stride, padding, dilation, n = geometry
    torch.manual_seed(seed)
    conv = torch.nn.Conv2d(c, c, (kh, kw), stride, padding, dilation, groups=c).eval()
    taps = conv.weight.detach().view(c, kh * kw).t().contiguous().view(kh, kw, c)
    with torch.no_grad():
        expected = ACTIVATIONS[activation](conv(x))
        got = torch.ops.pt2rt.depthwise_conv2d_act(x, taps, conv.bias, list(stride), list(padding), list(dilation),
                                                   activation)
    return expected, got


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_activation_after_the_sum_gives_torchs_answer(activation):
    """pt2rt::depthwise_conv2d_act: each row's outputs through the activation once the row is summed - every
    geometry (rows of whole vectors and of a part of one), NaN and inf where torch has them."""
    for geometry in GEOMETRIES:
        c, h, w, *_, n = geometry
        x = torch.randn(n, c, h, w) * 4
        x.view(-1)[::7] = float("nan")
        x.view(-1)[3::11] = float("inf")
        x.view(-1)[5::13] = -float("inf")
        expected, got = act_and_kernel(geometry, activation, x)
        assert got.is_contiguous(memory_format=torch.channels_last)
        assert torch.equal(got.isnan(), expected.isnan()), geometry
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
        expected, got = act_and_kernel(geometry, activation, torch.randn(n, c, h, w) * 4)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_a_strided_view_as_input():
    geometry = (24, 10, 12, 3, 3, (1, 1), (1, 1), (1, 1), 2)
    x = torch.randn(2, 48, 10, 24)[:, ::2, :, ::2]  # neither layout
    expected, got = conv_and_kernel(geometry, x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_non_finite_values_reach_the_outputs_they_reach_in_torch():
    """Taps in the padding are skipped, as torch's CPU convolution skips them: an inf weight does not turn border
    outputs into NaN through a padding zero."""
    geometry = (16, 8, 8, 3, 3, (1, 1), (1, 1), (1, 1), 1)
    x = torch.randn(1, 16, 8, 8)
    x[0, 3, 2, 5], x[0, 9, 0, 0], x[0, 12, 7, 4] = float("nan"), float("inf"), float("-inf")
    expected, got = conv_and_kernel(geometry, x)
    assert expected.isnan().any() and expected.isinf().any()
    assert torch.equal(got.isnan(), expected.isnan())
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    c = 16
    conv = torch.nn.Conv2d(c, c, 3, padding=1, groups=c).eval()
    with torch.no_grad():
        conv.weight[5, 0, 0, 0] = float("inf")
        x = torch.randn(1, c, 6, 6)
        expected = conv(x)
        taps = conv.weight.view(c, 9).t().contiguous().view(3, 3, c)
        got = torch.ops.pt2rt.depthwise_conv2d(x, taps, conv.bias, [1, 1], [1, 1], [1, 1])
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.isinf(), expected.isinf())
    # 5 taps a row at stride 2, 20 pixels wide: blocks of 8 at both borders
    conv = torch.nn.Conv2d(c, c, 5, stride=2, padding=2, groups=c).eval()
    with torch.no_grad():
        conv.weight[5, 0, 1, 0] = float("inf")
        conv.weight[6, 0, 2, 4] = float("-inf")
        x = torch.randn(1, c, 7, 39)
        expected = conv(x)
        taps = conv.weight.view(c, 25).t().contiguous().view(5, 5, c)
        got = torch.ops.pt2rt.depthwise_conv2d(x, taps, conv.bias, [2, 2], [2, 2], [1, 1])
    assert expected.isinf().any()
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.isinf(), expected.isinf())
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_any_number_of_threads_gives_one_threads_answer_bit_for_bit():
    geometry = (72, 28, 28, 5, 5, (1, 1), (2, 2), (1, 1), 3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _, one = conv_and_kernel(geometry)
        for threads in (2, 3):
            torch.set_num_threads(threads)
            _, got = conv_and_kernel(geometry)
            assert torch.equal(got, one), threads
    finally:
        torch.set_num_threads(before)


def test_bad_arguments_are_refused_naming_what():
    x, w, b = torch.zeros(1, 8, 5, 5), torch.zeros(3, 3, 8), torch.zeros(8)
    op = torch.ops.pt2rt.depthwise_conv2d
    with pytest.raises(RuntimeError, match=r"x has 8 channels, weight 4 and bias 8"):
        op(x, torch.zeros(3, 3, 4), b, [1, 1], [1, 1], [1, 1])
    with pytest.raises(RuntimeError, match=r"expected weight \[kh, kw, C\], got \[8, 1, 3, 3\]"):
        op(x, torch.zeros(8, 1, 3, 3), b, [1, 1], [1, 1], [1, 1])
    with pytest.raises(RuntimeError, match="expected float32 tensors, got Double"):
        op(x.double(), w, b, [1, 1], [1, 1], [1, 1])
    with pytest.raises(RuntimeError, match="expected stride as 2 values, got 3"):
        op(x, w, b, [1, 1, 1], [1, 1], [1, 1])
    with pytest.raises(RuntimeError, match="expected positive strides"):
        op(x, w, b, [0, 1], [1, 1], [1, 1])
    with pytest.raises(RuntimeError, match=r"the 3x3 kernel .* is larger than the padded input 5x5"):
        op(x, w, b, [1, 1], [0, 0], [3, 3])
    with pytest.raises(RuntimeError, match="pt2rt::depthwise_conv2d_act: unknown activation 'tanh', expected none, "
                                           "relu, relu6, hardswish, hardsigmoid, silu, sigmoid or gelu"):
        torch.ops.pt2rt.depthwise_conv2d_act(x, w, b, [1, 1], [1, 1], [1, 1], "tanh")
    with pytest.raises(RuntimeError, match=r"pt2rt::depthwise_conv2d_act: x has 8 channels, weight 4"):
        torch.ops.pt2rt.depthwise_conv2d_act(x, torch.zeros(3, 3, 4), b, [1, 1], [1, 1], [1, 1], "relu")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.expand = torch.nn.Conv2d(4, 24, 1)
        self.dw = torch.nn.Conv2d(24, 24, 5, stride=2, padding=2, groups=24)
        self.dw_nobias = torch.nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False)
        self.dw_bn = torch.nn.Conv2d(24, 24, 3, padding=1, groups=24, bias=False)
        self.bn = torch.nn.BatchNorm2d(24)
        self.dw_shared = torch.nn.Conv2d(24, 24, 3, padding=1, groups=24)
        self.multiplier = torch.nn.Conv2d(24, 48, 3, padding=1, groups=24)  # 2 filters per channel: not depthwise
        self.grouped = torch.nn.Conv2d(48, 48, 3, padding=1, groups=12)
        with torch.no_grad():  # statistics of their own, so that folding them shows
            self.bn.running_mean.uniform_(-1, 1), self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5), self.bn.bias.uniform_(-1, 1)

    def forward(self, x):
        y = torch.nn.functional.hardswish(self.expand(x))
        y = torch.relu(self.dw(y))
        y = self.dw_nobias(y) + y
        y = torch.nn.functional.silu(self.bn(self.dw_bn(y)))
        z = self.dw_shared(y)  # used twice: its activation stays inductor's
        y = torch.sigmoid(z) * z
        return self.grouped(self.multiplier(y))


def targets(ep):
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def test_the_rewritten_graph_gives_the_eager_answer_with_one_call_per_depthwise_convolution():
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 4, 15, 15)
    ep = convolutions.fuse(torch.export.export(model, (x,), strict=False))
    calls = targets(ep)
    assert calls.count("pt2rt.depthwise_conv2d.default") == 2  # dw_nobias, dw_shared
    acts = [n.args[6] for n in ep.graph.nodes if n.target is torch.ops.pt2rt.depthwise_conv2d_act.default]
    assert sorted(acts) == ["relu", "silu"]  # dw, dw_bn with its batch norm folded in
    assert not any("batch_norm" in t or "silu" in t or "relu" in t for t in calls), calls
    assert calls.count("aten.sigmoid.default") == 1
    assert calls.count("pt2rt.pointwise_conv2d.default") == 1  # expand (test_pointwise.py)
    assert sum("conv2d.default" in t and "pt2rt" not in t for t in calls) == 2  # multiplier, grouped
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=1e-5, atol=1e-5)
    # a dynamic batch traces through the op's fake
    dims = {"x": {0: torch.export.Dim("batch", min=1, max=8)}}
    ep = convolutions.fuse(torch.export.export(model, (x,), dynamic_shapes=dims, strict=False))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x[:1]), model(x[:1]), rtol=1e-5, atol=1e-5)


class FoldEdges(torch.nn.Module):
    """Batch norms after depthwise convolutions that fold only with care: one without affine parameters and with a
    large eps and nothing after it, one whose output is used twice (its activation stays inductor's)."""

    def __init__(self):
        super().__init__()
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.bn = torch.nn.BatchNorm2d(8, eps=0.5, affine=False)
        self.dw_nobias = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.bn_twice = torch.nn.BatchNorm2d(8)
        with torch.no_grad():
            for bn in (self.bn, self.bn_twice):
                bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.1, 2)
            self.bn_twice.weight.uniform_(0.5, 1.5), self.bn_twice.bias.uniform_(-1, 1)

    def forward(self, x):
        z = self.bn_twice(self.dw_nobias(self.bn(self.dw(x))))
        return torch.relu(z) + z


def test_batch_norms_fold_with_their_eps_without_affine_parameters_and_keep_every_use():
    torch.manual_seed(0)
    model = FoldEdges().eval()
    x = torch.randn(2, 8, 7, 7)
    ep = convolutions.fuse(torch.export.export(model, (x,), strict=False))
    calls = targets(ep)
    # both folded into plain calls: nothing to apply after the first, the second's output also added
    assert calls.count("pt2rt.depthwise_conv2d.default") == 2 and "pt2rt.depthwise_conv2d_act.default" not in calls
    assert not any("batch_norm" in t for t in calls) and calls.count("aten.relu.default") == 1, calls
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=1e-5, atol=1e-5)


def test_other_dtypes_and_transposed_convolutions_are_left_to_torch():
    model = torch.nn.Sequential(torch.nn.ConvTranspose2d(8, 8, 3, groups=8)).eval()
    ep = convolutions.fuse(torch.export.export(model, (torch.randn(1, 8, 6, 6),), strict=False))
    assert "pt2rt.depthwise_conv2d.default" not in targets(ep)
    model = torch.nn.Conv2d(8, 8, 3, groups=8).double().eval()
    ep = convolutions.fuse(torch.export.export(model, (torch.randn(1, 8, 6, 6).double(),), strict=False))
    assert "pt2rt.depthwise_conv2d.default" not in targets(ep)


def test_without_the_library_the_convolutions_stay_torchs_with_a_warning(monkeypatch):
    monkeypatch.setattr(recurrent, "find_library", lambda: None)
    monkeypatch.setattr(recurrent, "_registered", lambda: False)  # as in a process that never loaded it
    model = torch.nn.Conv2d(8, 8, 3, groups=8).eval()
    said = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("export_tools").addHandler(handler)
    try:
        ep = convolutions.fuse(torch.export.export(model, (torch.randn(1, 8, 6, 6),), strict=False))
    finally:
        logging.getLogger("export_tools").removeHandler(handler)
    assert "pt2rt.depthwise_conv2d.default" not in targets(ep)
    assert said == ["libpt2rt_kernels.so not found: the model's 1 depthwise, 0 pointwise and 0 3x3 convolution(s) "
                    "stay ATen's"]


def _cpu_flags() -> set[str]:
    import re
    from pathlib import Path
    return set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())


def run_in_each_isa(module: str, calls: str) -> None:
    """`calls` (lines using `t`, the test module `module`) with the kernels library loaded, once per ISA build this
    CPU runs (ATEN_CPU_CAPABILITY caps the kernels' choice, made once per process), each in a process of its own."""
    import os
    import subprocess
    import sys
    body = (f"import sys; sys.path.insert(0, 'tests/python'); import {module} as t\n"
            "from export_tools import libraries, recurrent\n"
            "libraries.load_ops_library(recurrent.find_library())\n" + calls)
    flags = _cpu_flags()
    needs = {"default": set(), "avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}
    for isa in (isa for isa, flags_needed in needs.items() if flags_needed <= flags):
        done = subprocess.run([sys.executable, "-c", body], env={**os.environ, "ATEN_CPU_CAPABILITY": isa},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"ATEN_CPU_CAPABILITY={isa}: {done.stderr[-2000:]}"


def test_the_kernel_of_every_isa_gives_torchs_answer():
    """Compiled per ISA and chosen once per process: each one this CPU runs."""
    run_in_each_isa("test_depthwise",
                    "for g in t.GEOMETRIES: t.test_the_kernel_gives_torchs_answer(g)\n"
                    "t.test_non_finite_values_reach_the_outputs_they_reach_in_torch()\n"
                    "for a in t.ACTIVATIONS: t.test_the_activation_after_the_sum_gives_torchs_answer(a)\n")


def strides_of_inputs(code: str, op: str = "depthwise_conv2d") -> list[tuple[int, ...]]:
    """The strides of the buffer each pt2rt::<op> call in inductor's Python wrapper is given."""
    strides, alias = {}, {}
    for name, shape_strides in re.findall(r"(buf\d+) = empty_strided_cpu\(\((.*?)\), torch", code):
        strides[name] = shape_strides
    for name, shape_strides in re.findall(r"assert_size_stride\((buf\d+), (\(.*?\), \(.*?\))", code):
        strides.setdefault(name, shape_strides)
    for name, source in re.findall(r"^\s*(buf\d+) = (buf\d+)\b", code, re.M):
        alias[name] = source

    def resolve(name):
        while name not in strides and name in alias:
            name = alias[name]
        return tuple(int(s) for s in strides[name].split("), (")[1].strip("()").split(",") if s.strip())

    return [resolve(name) for name in re.findall(rf"torch\.ops\.pt2rt\.{op}\.default\((buf\d+)", code)]


def test_inductor_gives_the_kernel_channels_last_inputs():
    """The kernel reads channels-last images (any other layout it copies first): inductor is told so, or it would
    give the op eager's layout and make every call copy its input."""
    from torch._inductor.utils import run_and_get_code
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 4, 15, 15)
    ep = convolutions.fuse(torch.export.export(model, (x,), strict=False))
    from torch._inductor import config
    with torch.no_grad(), config.patch(freezing=True):  # as export_tools compiles
        got, (code,) = run_and_get_code(torch.compile(ep.module()), x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    inputs = strides_of_inputs(code) + strides_of_inputs(code, "depthwise_conv2d_act")
    assert len(inputs) == 4, code
    assert all(s[1] == 1 and s[3] == 24 for s in inputs), inputs
    # inductor's own fallback for the op would constrain its input to eager's strides (an AOTI compile then gave it
    # NCHW images from a 1x1 convolution's epilogue): export_tools' lowering with its channels-last constraint stands
    from torch._inductor import lowering
    for op in (torch.ops.pt2rt.depthwise_conv2d.default, torch.ops.pt2rt.depthwise_conv2d_act.default):
        constraint = lowering.maybe_layout_constraints(op)
        assert constraint is not None and constraint.__name__ == "channels_last_input", op


def test_large_images_stay_onednns():
    """Past MAX_INPUT_BYTES the kernel is memory-bound and oneDNN moves less: such convolutions stay ATen's."""
    side = int((convolutions.MAX_INPUT_BYTES / 4 / 16) ** 0.5) + 1
    model = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16).eval()
    ep = convolutions.fuse(torch.export.export(model, (torch.randn(1, 16, side, side),), strict=False))
    assert "pt2rt.depthwise_conv2d.default" not in targets(ep)
    ep = convolutions.fuse(torch.export.export(model, (torch.randn(1, 16, side - 2, side - 2),), strict=False))
    assert "pt2rt.depthwise_conv2d.default" in targets(ep)
