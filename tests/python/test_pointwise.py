"""Pointwise convolutions as one call of pt2rt's kernel with the batch norm and activation after them
(export_tools.convolutions, libpt2rt_kernels.so's pt2rt::pointwise_conv2d): the kernel against torch's convolution and
activations, the graph rewrite against the eager model, without compiling (test_export.py and test_lite.py compile
packages with pointwise convolutions)."""

import pytest
import torch

from export_tools import convolutions, libraries, recurrent

F = torch.nn.functional
ACTIVATIONS = {"none": lambda y: y, "relu": torch.relu, "relu6": F.relu6, "hardswish": F.hardswish,
               "hardsigmoid": F.hardsigmoid, "silu": F.silu, "sigmoid": torch.sigmoid}
# batch, in channels, out channels, height, width: tiles of every width and their last rows, a pixel alone, one
# output channel, more outputs than a tile is wide
SHAPES = [(1, 16, 72, 7, 9), (2, 24, 88, 5, 5), (1, 96, 24, 1, 1), (3, 5, 1, 4, 3), (1, 40, 240, 3, 7),
          (1, 1, 17, 6, 1), (2, 64, 48, 13, 1), (1, 7, 33, 5, 5), (1, 130, 130, 2, 3)]


@pytest.fixture(scope="module", autouse=True)
def kernels():
    path = recurrent.find_library()
    assert path is not None, f"{recurrent.LIBRARY_NAME} not found: build first or set {recurrent.ENV_VAR}"
    libraries.load_ops_library(path)
    assert recurrent.load_kernels()


def packed(w: torch.Tensor) -> torch.Tensor:
    cout, cin = w.shape[:2]
    ldw = -(-cout // convolutions.COLUMN_ALIGN) * convolutions.COLUMN_ALIGN
    return F.pad(w.view(cout, cin).t(), (0, ldw - cout)).contiguous()


def run_both(shape, activation, x=None, bias=True, seed=0):
    n, cin, cout, h, w = shape
    torch.manual_seed(seed)
    x = torch.randn(n, cin, h, w) * 3 if x is None else x
    weight = torch.randn(cout, cin, 1, 1) / cin ** 0.5
    b = torch.randn(cout) if bias else None
    with torch.no_grad():
        expected = ACTIVATIONS[activation](F.conv2d(x, weight, b))
        got = torch.ops.pt2rt.pointwise_conv2d(x, packed(weight), b, cout, activation)
    return expected, got


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_kernel_gives_torchs_answer(shape):
    for activation in ACTIVATIONS:
        for layout in (torch.contiguous_format, torch.channels_last):
            n, cin, _cout, h, w = shape
            x = (torch.randn(n, cin, h, w) * 3).contiguous(memory_format=layout)
            for bias in (True, False):
                expected, got = run_both(shape, activation, x, bias)
                assert got.shape == expected.shape
                assert got.is_contiguous(memory_format=torch.channels_last), "the op returns channels-last"
                torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"{activation}: {m}")


def test_a_strided_view_as_input():
    x = torch.randn(2, 48, 10, 24)[:, ::2, :, ::2]  # neither layout
    expected, got = run_both((2, 24, 40, 10, 12), "hardswish", x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_non_finite_values_reach_the_outputs_they_reach_in_torch():
    """NaN passes every activation as eager's (a ReLU does not make it 0), and inf goes where eager sends it:
    hardswish(-inf) and silu(-inf) are NaN, sigmoid(-inf) 0, relu6(inf) 6."""
    shape = (1, 8, 40, 4, 5)
    x = torch.randn(1, 8, 4, 5)
    x[0, 3, 2, 1], x[0, 5, 0, 0], x[0, 6, 3, 4], x[0, 1, 1, 2] = float("nan"), float("inf"), float("-inf"), 1e30
    for activation in ACTIVATIONS:
        expected, got = run_both(shape, activation, x)
        assert expected.isnan().any(), activation
        assert torch.equal(got.isnan(), expected.isnan()), activation
        assert torch.equal(got.isinf(), expected.isinf()), activation
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    # large negative sums: e^-y past float's range
    x = torch.full((1, 8, 2, 3), -30.0)
    for activation in ("silu", "sigmoid"):
        expected, got = run_both((1, 8, 16, 2, 3), activation, x)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_logistic_activations_near_the_ends_of_floats_range():
    """SiLU and sigmoid where e^-y nears float's range and passes it (the kernels' e^x clamps there and doubles past
    2^127): each output as eager's, 0 and -0 included, inf and NaN where eager has them."""
    y = torch.tensor([-1e30, -100.0, -89.0, -88.8, -88.72, -88.5, -87.5, -86.5, -86.0, -85.9, -20.0, -1e-30, 0.0,
                      20.0, 85.9, 86.5, 88.5, 88.8, 100.0, 1e30, float("inf"), float("-inf"), float("nan")])
    x = y.view(1, 1, 1, -1)
    weight = torch.zeros(1, 16)
    weight[0, 0] = 1.0  # one input channel to one output: the sums are y itself
    for activation in ("silu", "sigmoid"):
        with torch.no_grad():
            got = torch.ops.pt2rt.pointwise_conv2d(x, weight, None, 1, activation).flatten()
        expected = ACTIVATIONS[activation](y)
        assert torch.equal(got.isnan(), expected.isnan()), (activation, got, expected)
        assert torch.equal(got.isinf(), expected.isinf()), (activation, got, expected)
        torch.testing.assert_close(got, expected, rtol=2e-6, atol=1e-37, equal_nan=True, msg=activation)


def test_logistic_activations_within_a_few_ulp_of_float64():
    """The kernels' e^x (a fitted polynomial, runtime/kernels/exp_impl.h) to float's precision: SiLU and sigmoid over
    the whole range where they are neither 0 nor their input, against float64, within 5 ulp (e^x's 1 and the
    roundings of the sum and the division)."""
    y = torch.cat([torch.linspace(-87.0, 88.0, 150_001), torch.linspace(-2.0, 2.0, 40_001)])
    x = y.view(1, 1, 1, -1)
    weight = torch.zeros(1, 16)
    weight[0, 0] = 1.0  # one input channel to one output: the sums are y itself
    y64 = y.double()
    expected = {"silu": y64 / (1 + torch.exp(-y64)), "sigmoid": 1 / (1 + torch.exp(-y64))}
    for activation in ("silu", "sigmoid"):
        with torch.no_grad():
            got = torch.ops.pt2rt.pointwise_conv2d(x, weight, None, 1, activation).flatten().double()
        error = ((got - expected[activation]).abs() / expected[activation].abs().clamp_min(1e-37)).max().item()
        assert error <= 5 * 2.0 ** -24, (activation, error)


def test_any_number_of_threads_gives_one_threads_answer_bit_for_bit():
    shape = (3, 72, 40, 28, 28)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        _, one = run_both(shape, "hardswish")
        for threads in (2, 3):
            torch.set_num_threads(threads)
            _, got = run_both(shape, "hardswish")
            assert torch.equal(got, one), threads
    finally:
        torch.set_num_threads(before)


def test_bad_arguments_are_refused_naming_what():
    op = torch.ops.pt2rt.pointwise_conv2d
    x, w, b = torch.zeros(1, 8, 5, 5), torch.zeros(8, 16), torch.zeros(10)
    with pytest.raises(RuntimeError, match="unknown activation 'tanh', expected none, relu, relu6"):
        op(x, w, b, 10, "tanh")
    with pytest.raises(RuntimeError, match=r"x has 8 channels and 10 come out; expected weight \[8, a multiple of 16 "
                                           r">= 10\] and bias \[10\], got \[4, 16\] and \[10\]"):
        op(x, torch.zeros(4, 16), b, 10, "none")
    with pytest.raises(RuntimeError, match="expected weight"):
        op(x, torch.zeros(8, 12), b, 10, "none")  # not padded to whole vectors
    with pytest.raises(RuntimeError, match="expected weight"):
        op(x, w, b, 17, "none")  # more outputs than the weight has columns
    with pytest.raises(RuntimeError, match="expected weight"):
        op(x, w, torch.zeros(9), 10, "none")
    with pytest.raises(RuntimeError, match="expected float32 tensors, got Double"):
        op(x.double(), w, b, 10, "none")
    with pytest.raises(RuntimeError, match=r"expected x \[N, C_in, H, W\]"):
        op(torch.zeros(8, 5), w, b, 10, "none")


class Net(torch.nn.Module):
    """What the rewrite takes and leaves: each 1x1 convolution with what follows it alone."""

    def __init__(self):
        super().__init__()
        conv = torch.nn.Conv2d
        self.expand, self.bn1 = conv(4, 24, 1), torch.nn.BatchNorm2d(24)
        self.project, self.bn2 = conv(24, 4, 1, bias=False), torch.nn.BatchNorm2d(4, affine=False)
        self.se1, self.se2 = conv(24, 8, 1), conv(8, 24, 1)
        self.shared = conv(4, 16, 1)
        self.clamped = conv(16, 16, 1)
        self.strided = conv(16, 16, 1, stride=2)
        self.spatial = conv(16, 16, 3, padding=1)
        self.last = conv(16, 8, 1)
        for bn in (self.bn1, self.bn2):  # statistics of a trained model
            bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2)
        self.bn1.weight.data.uniform_(0.5, 1.5), self.bn1.bias.data.uniform_(-1, 1)

    def forward(self, x):
        y = F.hardswish(self.bn1(self.expand(x)), inplace=True)  # conv + bn + hardswish_
        s = F.hardsigmoid(self.se2(torch.relu(self.se1(y.mean((2, 3), keepdim=True)))))
        y = self.bn2(self.project(y * s)) + x  # conv + bn, then a residual add
        z = self.shared(y)  # two users: conv alone
        z = torch.clamp(self.clamped(z + z.sigmoid()), 0.0, 1.0)  # hardtanh is not 0..6: conv alone
        z = F.relu6(z) + self.strided(z)[..., :1, :1] + self.spatial(z)  # neither is pointwise
        return F.silu(self.last(z))


def calls(ep):
    return [n for n in ep.graph.nodes if n.op == "call_function"]


def test_the_rewritten_graph_gives_the_eager_answer_with_the_batch_norms_and_activations_folded_in():
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(2, 4, 9, 9)
    ep = convolutions.fuse(torch.export.export(model, (x,), strict=False))
    got = sorted(n.args[4] for n in calls(ep) if n.target is torch.ops.pt2rt.pointwise_conv2d.default)
    assert got == ["hardsigmoid", "hardswish", "none", "none", "none", "relu", "silu"]
    left = [str(n.target) for n in calls(ep)]
    assert not any("batch_norm" in t or "hardswish" in t or "hardsigmoid" in t or "silu" in t for t in left), left
    assert sum(t == "aten.conv2d.default" for t in left) == 2  # the strided and the 3x3 ones
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=1e-5, atol=1e-5)
    # a dynamic batch traces through the op's fake
    dims = {"x": {0: torch.export.Dim("batch", min=1, max=8)}}
    ep = convolutions.fuse(torch.export.export(model, (x,), dynamic_shapes=dims, strict=False))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x[:1]), model(x[:1]), rtol=1e-5, atol=1e-5)


def test_other_dtypes_grouped_and_strided_convolutions_are_left_to_torch():
    for model, x in ((torch.nn.Conv2d(8, 8, 1).double(), torch.randn(1, 8, 4, 4).double()),
                     (torch.nn.Conv2d(8, 8, 1, groups=2), torch.randn(1, 8, 4, 4)),
                     (torch.nn.Conv2d(8, 8, 1, padding=1), torch.randn(1, 8, 4, 4)),
                     (torch.nn.Conv1d(8, 8, 1), torch.randn(1, 8, 4))):
        ep = convolutions.fuse(torch.export.export(model.eval(), (x,), strict=False))
        assert not any(n.target is torch.ops.pt2rt.pointwise_conv2d.default for n in calls(ep)), model


def test_inductor_gives_the_kernel_channels_last_inputs():
    """The kernel reads channels-last images (any other layout it copies first): inductor is told so."""
    from test_depthwise import strides_of_inputs
    from torch._inductor import config, lowering
    from torch._inductor.utils import run_and_get_code
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(24, 16, 3, padding=1), torch.nn.Hardswish(),
                                torch.nn.Conv2d(16, 40, 1), torch.nn.ReLU(), torch.nn.Conv2d(40, 8, 1)).eval()
    x = torch.randn(2, 24, 7, 7)
    ep = convolutions.fuse(torch.export.export(model, (x * 2,), strict=False))
    with torch.no_grad(), config.patch(freezing=True):  # as export_tools compiles
        got, (code,) = run_and_get_code(torch.compile(ep.module()), x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    inputs = strides_of_inputs(code, "pointwise_conv2d")
    assert len(inputs) == 2, code
    assert all(s[1] == 1 for s in inputs), inputs
    constraint = lowering.maybe_layout_constraints(torch.ops.pt2rt.pointwise_conv2d.default)
    assert constraint is not None and constraint.__name__ == "channels_last_input"


def test_the_kernel_of_every_isa_gives_torchs_answer():
    """Compiled per ISA and chosen once per process: each one this CPU runs."""
    from test_depthwise import run_in_each_isa
    run_in_each_isa("test_pointwise", "for s in t.SHAPES: t.test_the_kernel_gives_torchs_answer(s)\n"
                                      "t.test_non_finite_values_reach_the_outputs_they_reach_in_torch()\n"
                                      "t.test_logistic_activations_near_the_ends_of_floats_range()\n")
