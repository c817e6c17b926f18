"""3x3 convolutions by Winograd's F(2x2, 3x3) with the batch norm and activation after them (export_tools.convolutions,
libpt2rt_kernels.so's pt2rt::winograd_conv2d): the kernel against torch's convolution in float64, inf and NaN against
eager's, the graph rewrite and its choices, without compiling (test_lite.py compiles a package with one)."""

import pytest
import torch

from export_tools import convolutions, libraries, recurrent
from test_pointwise import ACTIVATIONS, calls

F = torch.nn.functional
# batch, in channels, out channels, height, width, padding: odd sizes (a tile's last row or column outside the
# output), channels that are not whole vectors, an image smaller than a tile, no padding, wide padding
SHAPES = [(1, 32, 32, 8, 8, 1), (2, 20, 36, 7, 9, 1), (1, 40, 17, 5, 6, 0), (3, 16, 40, 1, 1, 1),
          (1, 64, 64, 13, 11, 1), (1, 8, 24, 2, 3, 2), (2, 3, 5, 4, 4, 1), (1, 130, 33, 6, 5, 1)]


@pytest.fixture(scope="module", autouse=True)
def kernels():
    path = recurrent.find_library()
    assert path is not None, f"{recurrent.LIBRARY_NAME} not found: build first or set {recurrent.ENV_VAR}"
    libraries.load_ops_library(path)
    assert recurrent.load_kernels()


def transformed(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's weight and taps as export_tools lays them out (G g G^T in float64)."""
    cout, cin = w.shape[:2]
    ldw = -(-cout // convolutions.COLUMN_ALIGN) * convolutions.COLUMN_ALIGN
    g = torch.tensor([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], dtype=torch.float64)
    u = torch.einsum("ik,ockl,jl->ijco", g, w.double(), g).reshape(16, cin, cout).float()
    return F.pad(u, (0, ldw - cout)).contiguous(), F.pad(w.permute(2, 3, 1, 0), (0, ldw - cout)).contiguous()


def run(x, w, b, padding, activation):
    weight, taps = transformed(w)
    return torch.ops.pt2rt.winograd_conv2d(x, weight, taps, b, w.shape[0], [padding, padding], activation)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_kernel_gives_torchs_answer_within_rounding(shape):
    n, cin, cout, h, wd, pad = shape
    torch.manual_seed(0)
    w = torch.randn(cout, cin, 3, 3) / (9 * cin) ** 0.5
    for activation in ACTIVATIONS:
        for layout in (torch.contiguous_format, torch.channels_last):
            x = (torch.randn(n, cin, h, wd) * 3).contiguous(memory_format=layout)
            for b in (torch.randn(cout), None):
                with torch.no_grad():
                    exact = ACTIVATIONS[activation](F.conv2d(x.double(), w.double(), None if b is None else b.double(),
                                                             padding=pad))
                    got = run(x, w, b, pad, activation)
                assert got.shape == exact.shape and got.dtype == torch.float32
                assert got.is_contiguous(memory_format=torch.channels_last), "the op returns channels-last"
                # F(2x2, 3x3) rounds about as a direct sum does: well within 2e-6 of the output's largest value
                err = (got.double() - exact).abs().max().item()
                assert err <= 2e-6 * max(exact.abs().max().item(), 1e-3), (activation, err)


def test_non_finite_values_reach_the_outputs_they_reach_in_torch():
    """inf and NaN in a tile's inputs would spread over its outputs through the transforms: those tiles are computed
    directly, as eager does (a zero tap times inf gives NaN there, a border tap in the padding is skipped)."""
    torch.manual_seed(0)
    x = torch.randn(2, 40, 9, 10)
    x[0, 3, 2, 5], x[0, 7, 6, 1], x[1, 2, 0, 0], x[1, 2, 8, 9] = float("inf"), float("nan"), -float("inf"), 1.0
    x[1, 5, 4, 4] = float("inf")
    w = torch.randn(36, 40, 3, 3) / 20
    w[4, 5, :, :] = 0  # output channel 4 sees the inf at (4, 4) through zero taps only: NaN
    w[9, 3, 1, 1] = -w[9, 3, 1, 1].abs()
    b = torch.randn(36)
    for activation in ACTIVATIONS:
        with torch.no_grad():
            expected = ACTIVATIONS[activation](F.conv2d(x, w, b, padding=1))
            got = run(x, w, b, 1, activation)
        if activation == "none":
            assert expected.isnan().sum() > 50 and expected.isposinf().sum() > 50 and expected.isneginf().sum() > 50
        for kind in (torch.isnan, torch.isposinf, torch.isneginf):
            assert torch.equal(kind(got), kind(expected)), (activation, kind.__name__)
        finite = expected.isfinite()
        torch.testing.assert_close(got[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_inputs_near_floats_range_are_computed_directly_where_the_transform_would_overflow():
    """3e38 - (-3e38) is inf in the transform; the direct sums of those inputs times small taps are finite."""
    torch.manual_seed(0)
    x = torch.randn(1, 32, 6, 6)
    x[0, :, 2, 2], x[0, :, 4, 2] = 3e38, -3e38
    w = torch.randn(32, 32, 3, 3) / 1e4
    with torch.no_grad():
        expected = F.conv2d(x.double(), w.double(), padding=1)
        got = run(x, w, None, 1, "none")
    assert expected.abs().max() < 3e38 and got.isfinite().all()
    assert ((got.double() - expected).abs() <= 1e-5 * expected.abs().max()).all()


def test_any_number_of_threads_gives_one_threads_answer_bit_for_bit():
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 48, 29, 31), torch.randn(40, 48, 3, 3) / 20, torch.randn(40)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run(x, w, b, 1, "relu")
        for threads in (2, 3):
            torch.set_num_threads(threads)
            assert torch.equal(run(x, w, b, 1, "relu"), one), threads
    finally:
        torch.set_num_threads(before)


def test_bad_arguments_are_refused_naming_what():
    op = torch.ops.pt2rt.winograd_conv2d
    x, w, t, b = torch.zeros(1, 8, 5, 5), torch.zeros(16, 8, 16), torch.zeros(3, 3, 8, 16), torch.zeros(10)
    with pytest.raises(RuntimeError, match="unknown activation 'tanh', expected none, relu, relu6"):
        op(x, w, t, b, 10, [1, 1], "tanh")
    with pytest.raises(RuntimeError, match=r"x has 8 channels and 10 come out; expected weight \[16, 8, L\], taps "
                                           r"\[3, 3, 8, L\] \(L a multiple of 16 >= 10\) and bias \[10\], got "
                                           r"\[16, 4, 16\], \[3, 3, 8, 16\] and \[10\]"):
        op(x, torch.zeros(16, 4, 16), t, b, 10, [1, 1], "none")
    with pytest.raises(RuntimeError, match="expected weight"):
        op(x, w, torch.zeros(3, 3, 8, 32), b, 10, [1, 1], "none")  # taps as wide as the weight
    with pytest.raises(RuntimeError, match="expected weight"):
        op(x, torch.zeros(16, 8, 12), torch.zeros(3, 3, 8, 12), b, 10, [1, 1], "none")  # not whole vectors
    with pytest.raises(RuntimeError, match="expected weight"):
        op(x, w, t, b, 17, [1, 1], "none")  # more outputs than the weight has columns
    with pytest.raises(RuntimeError, match="expected weight"):
        op(x, w, t, torch.zeros(9), 10, [1, 1], "none")
    with pytest.raises(RuntimeError, match="expected float32 tensors, got Double"):
        op(x.double(), w, t, b, 10, [1, 1], "none")
    with pytest.raises(RuntimeError, match=r"expected x \[N, C_in, H, W\]"):
        op(torch.zeros(8, 5), w, t, b, 10, [1, 1], "none")
    with pytest.raises(RuntimeError, match="expected padding of two sizes >= 0"):
        op(x, w, t, b, 10, [1], "none")
    with pytest.raises(RuntimeError, match=r"a 1x5 image padded by \[0, 0\] is smaller than the 3x3 kernel"):
        op(torch.zeros(1, 8, 1, 5), w, t, b, 10, [0, 0], "none")


class Net(torch.nn.Module):
    """What the rewrite takes and leaves: 3x3 convolutions of 32 channels or more, stride 1, with what follows them
    alone."""

    def __init__(self):
        super().__init__()
        conv = torch.nn.Conv2d
        self.first, self.bn1 = conv(32, 48, 3, padding=1), torch.nn.BatchNorm2d(48)
        self.second = conv(48, 48, 3, padding=1, bias=False)
        self.valid = conv(48, 40, 3)                      # no padding, SiLU after
        self.strided = conv(48, 48, 3, stride=2, padding=1)
        self.dilated = conv(48, 48, 3, padding=2, dilation=2)
        self.grouped = conv(48, 48, 3, padding=1, groups=2)
        self.narrow = conv(48, 16, 3, padding=1)          # fewer than 32 out
        self.wide = conv(48, 48, 5, padding=2)
        self.small = conv(48, 48, 3)                      # a 3 x 3 output on the strided 5 x 5: too few outputs
        self.bn1.running_mean.uniform_(-1, 1), self.bn1.running_var.uniform_(0.5, 2)

    def forward(self, x):
        y = torch.relu(self.bn1(self.first(x)))           # conv + bn + relu
        y = self.second(y) + y                            # conv alone, then a residual add
        z = F.silu(self.valid(y))
        s = self.small(self.strided(y))
        return (z.sum() + s.sum() + self.dilated(y).sum() + self.grouped(y).sum() + self.narrow(y).sum()
                + self.wide(y).sum())


def test_the_rewritten_graph_gives_the_eager_answer_and_leaves_the_others_to_torch():
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(2, 32, 9, 9)
    ep = convolutions.fuse(torch.export.export(model, (x,), strict=False))
    got = [n.args[6] for n in calls(ep) if n.target is torch.ops.pt2rt.winograd_conv2d.default]
    assert got == ["relu", "none", "silu"]
    left = [str(n.target) for n in calls(ep)]
    assert not any("batch_norm" in t or "silu" in t for t in left), left
    assert sum(t == "aten.conv2d.default" for t in left) == 6  # strided, small, dilated, grouped, narrow, wide
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=1e-5, atol=1e-4)
    dims = {"x": {0: torch.export.Dim("batch", min=1, max=8)}}  # a dynamic batch traces through the op's fake
    ep = convolutions.fuse(torch.export.export(model, (x,), dynamic_shapes=dims, strict=False))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x[:1]), model(x[:1]), rtol=1e-5, atol=1e-4)


def test_without_folded_weights_the_3x3_convolutions_stay_torchs():
    """optimize="none" keeps the weights as parameters: the transform would run on every call."""
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU()).eval()
    ep = convolutions.fuse(torch.export.export(model, (torch.randn(1, 32, 8, 8),), strict=False), winograd=False)
    assert not any(n.target is torch.ops.pt2rt.winograd_conv2d.default for n in calls(ep))
    assert sum(str(n.target) == "aten.conv2d.default" for n in calls(ep)) == 1


def test_the_transformed_weights_stay_within_the_package_budget():
    """Each takes 16/9 of its convolution's weight more: past WINOGRAD_EXTRA_* the convolutions with the most outputs
    per weight byte go first, the rest stay oneDNN's."""
    model = torch.nn.Sequential(*[torch.nn.Conv2d(256, 256, 3, padding=1) for _ in range(3)],
                                torch.nn.Conv2d(256, 64, 3, padding=1), torch.nn.Conv2d(64, 64, 3, padding=1)).eval()
    ep = convolutions.fuse(torch.export.export(model, (torch.randn(1, 256, 8, 8),), strict=False))
    chosen = [n.args[4] for n in calls(ep) if n.target is torch.ops.pt2rt.winograd_conv2d.default]
    # 7.8 MB of weights: 7.3 MB to add; 4.2 MB for each 256 x 256 one, 1 MB and 0.3 MB for the others
    assert chosen == [256, 64, 64]  # a second 256 x 256 one would pass the budget


def test_inductor_gives_the_kernel_channels_last_inputs():
    from torch._inductor import lowering
    assert convolutions.register()
    constraint = lowering.maybe_layout_constraints(torch.ops.pt2rt.winograd_conv2d.default)
    assert constraint is not None and constraint.__name__ == "channels_last_input"


def test_the_kernel_of_every_isa_gives_torchs_answer():
    """Compiled per ISA and chosen once per process: each one this CPU runs."""
    from test_depthwise import run_in_each_isa
    run_in_each_isa("test_winograd", "for s in t.SHAPES: t.test_the_kernel_gives_torchs_answer_within_rounding(s)\n"
                                     "t.test_non_finite_values_reach_the_outputs_they_reach_in_torch()\n"
                                     "t.test_inputs_near_floats_range_are_computed_directly_where_the_transform"
                                     "_would_overflow()\n")
