"""Linear layers as pt2rt's kernel (export_tools.linear, libpt2rt_kernels.so's pt2rt::linear): the kernel against
float64 and eager, the graph rewrite against the eager model, without compiling (test_lite.py compiles packages whose
linear layers go through it, in the full and the lite runtime)."""

import pytest
import torch

from export_tools import libraries, linear, passes, recurrent

F = torch.nn.functional
# rows, features in, features out: whole tiles of 6 rows and the last 1-5, columns past whole vectors and panels,
# inputs past one block of the weight's rows (256: two and three blocks), a single row, column or feature
SHAPES = [(197, 192, 576), (13, 300, 33), (7, 600, 70), (1, 512, 1000), (5, 3, 17), (1, 1, 1), (25, 40, 130),
          (100, 257, 64)]


def gelu(y):
    """Eager's exact GELU in float64: float32's goes through oneDNN, whose AVX-512 code is within 1.2e-6 (ours 4.5e-7)
    and gives NaN at +inf (its AVX2 code, ATen's and float64's: +inf)."""
    return F.gelu(y.double()).to(y.dtype)


ACTIVATIONS = {"none": lambda y: y, "relu": F.relu, "relu6": F.relu6, "hardswish": F.hardswish,
               "hardsigmoid": F.hardsigmoid, "silu": F.silu, "sigmoid": torch.sigmoid, "gelu": gelu}


@pytest.fixture(scope="module", autouse=True)
def kernels():
    path = recurrent.find_library()
    assert path is not None, f"{recurrent.LIBRARY_NAME} not found: build first or set {recurrent.ENV_VAR}"
    libraries.load_ops_library(path)
    assert recurrent.load_kernels() and linear.register()


def panels(w):
    """w [out, in] as the kernel reads it: [ceil(out / 16), in, 16], zeros past out."""
    out, k = w.shape
    n = -(-out // 16)
    return F.pad(w, (0, 0, 0, n * 16 - out)).view(n, 16, k).permute(0, 2, 1).contiguous()


def layer(rows, k, out, seed=0):
    torch.manual_seed(seed)
    return torch.randn(rows, k), torch.randn(out, k) / k ** 0.5, torch.randn(out)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_kernel_gives_the_products_and_eagers_activations(shape):
    x, w, b = layer(*shape)
    expected = F.linear(x.double(), w.double(), b.double())
    got = torch.ops.pt2rt.linear(x, panels(w), b, shape[2], "none")
    assert got.shape == (shape[0], shape[2]) and got.is_contiguous()
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(torch.ops.pt2rt.linear(x, panels(w), None, shape[2], "none"),
                       torch.ops.pt2rt.linear(x, panels(w), torch.zeros(shape[2]), shape[2], "none"))
    for name, fn in ACTIVATIONS.items():
        torch.testing.assert_close(torch.ops.pt2rt.linear(x, panels(w), b, shape[2], name), fn(got),
                                   rtol=1e-5, atol=1e-6, msg=name)


def test_sums_in_input_order_as_the_pointwise_kernel():
    """Blocks of the weight's rows continue each output's sum where the block before left it: the same bits as the
    pointwise kernel's single pass (the same tiles' arithmetic), activation included."""
    for rows, out in ((31, 40), (1, 200), (2, 200)):  # one or two rows: tiles across several panels
        x, w, b = layer(rows, 777, out, seed=1)
        cols = -(-out // 16) * 16
        flat = F.pad(w.t(), (0, cols - out)).contiguous()
        for name in ("none", "gelu", "relu"):
            got = torch.ops.pt2rt.linear(x, panels(w), b, out, name)
            expected = torch.ops.pt2rt.pointwise_conv2d(x.view(rows, 777, 1, 1), flat, b, out, name).view(rows, out)
            assert torch.equal(got, expected), (rows, name)


def test_inputs_of_any_layout_and_rank():
    x, w, b = layer(24, 48, 20, seed=2)
    got = torch.ops.pt2rt.linear(x, panels(w), b, 20, "none")
    # rows of a wider matrix (read where they are), a transposed one and a 3-d view (copied): the same bits
    wide = torch.randn(24, 100)
    wide[:, 10:58] = x
    assert torch.equal(torch.ops.pt2rt.linear(wide[:, 10:58], panels(w), b, 20, "none"), got)
    assert torch.equal(torch.ops.pt2rt.linear(x.t().contiguous().t(), panels(w), b, 20, "none"), got)
    three = torch.ops.pt2rt.linear(x.view(4, 6, 48), panels(w), b, 20, "none")
    assert three.shape == (4, 6, 20) and torch.equal(three.view(24, 20), got)
    assert torch.equal(torch.ops.pt2rt.linear(x.view(6, 4, 48).transpose(0, 1), panels(w), b, 20, "none"),
                       got.view(6, 4, 20).transpose(0, 1))
    assert torch.ops.pt2rt.linear(torch.randn(0, 3, 48), panels(w), b, 20, "none").shape == (0, 3, 20)
    # no features in: the bias alone, then the activation
    assert torch.equal(torch.ops.pt2rt.linear(torch.randn(3, 0), panels(torch.randn(20, 0)), b, 20, "relu"),
                       F.relu(b).expand(3, 20))


def test_gelu_as_eager_at_the_ends_of_its_range():
    inf, nan = float("inf"), float("nan")
    y = torch.tensor([-inf, -1e30, -100.0, -13.0, -9.0, -5.0, -3.0, -1.0, -1e-3, -0.0, 0.0, 1e-30, 1e-3, 0.5, 1.0,
                      3.0, 10.0, 1e30, inf, nan])
    got = torch.ops.pt2rt.linear(y.view(-1, 1), panels(torch.ones(1, 1)), None, 1, "gelu").view(-1)
    expected = gelu(y)
    assert torch.equal(got.isnan(), expected.isnan())
    # erf within 1.5e-7 (Abramowitz and Stegun 7.1.26, eager's vectorized erf): y / 2 times that
    torch.testing.assert_close(got.nan_to_num(), expected.nan_to_num(), rtol=2e-6, atol=3e-7)
    y = torch.linspace(-12, 12, 100001)
    got = torch.ops.pt2rt.linear(y.view(-1, 1), panels(torch.ones(1, 1)), None, 1, "gelu").view(-1)
    # where erf is near -1, 1 + erf cancels: e^-x^2's last bit shows at ~1e-7 of the output
    torch.testing.assert_close(got, gelu(y), rtol=2e-6, atol=3e-7)


def test_non_finite_inputs_reach_the_outputs_they_reach_in_eager():
    x, w, b = layer(30, 50, 40, seed=3)
    x[2, 7], x[5, 0], x[9, 49] = float("nan"), float("inf"), float("-inf")
    w[3, 11] = float("inf")
    for name in ("none", "relu", "gelu", "sigmoid"):
        got = torch.ops.pt2rt.linear(x, panels(w), b, 40, name)
        expected = ACTIVATIONS[name](F.linear(x, w, b))
        assert torch.equal(got.isnan(), expected.isnan()), name
        assert torch.equal(got.isinf(), expected.isinf()), name
        finite = expected.isfinite()
        torch.testing.assert_close(got[finite], expected[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(197, 192, 576), (9, 256, 1000), (300, 64, 40), (600, 64, 160)],
                         ids=lambda s: "x".join(map(str, s)))
def test_every_thread_count_gives_the_same_bits(shape):
    """Threads take whole panels of columns or rows (few panels, or rows at least twice the columns); an output's sum
    runs in one order whatever piece it is in."""
    x, w, b = layer(*shape, seed=4)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.pt2rt.linear(x, panels(w), b, shape[2], "gelu")
        torch.set_num_threads(2)
        two = torch.ops.pt2rt.linear(x, panels(w), b, shape[2], "gelu")
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


@pytest.mark.parametrize("args, message", [
    ((torch.randn(2, 8, dtype=torch.float64), panels(torch.randn(5, 8)), None, 5, "none"), "expected float32"),
    ((torch.randn(2, 8), panels(torch.randn(5, 8)).view(-1, 16), None, 5, "none"), r"weight \[panels, in, 16\]"),
    ((torch.randn(2, 8), panels(torch.randn(5, 7)), None, 5, "none"), r"expected weight \[1, 8, 16\]"),
    ((torch.randn(2, 8), panels(torch.randn(5, 8)), None, 17, "none"), r"expected weight \[2, 8, 16\]"),
    ((torch.randn(2, 8), panels(torch.randn(5, 8)), torch.randn(4), 5, "none"), r"bias \[5\]"),
    ((torch.randn(2, 8), panels(torch.randn(5, 8)), None, 5, "tanh"), "unknown activation 'tanh'"),
    ((torch.randn(2, 8), panels(torch.randn(5, 8)), None, 0, "none"), "expected out_features > 0, got 0"),
])
def test_bad_arguments_are_named(args, message):
    with pytest.raises(RuntimeError, match=message):
        torch.ops.pt2rt.linear(*args)


class Layers(torch.nn.Module):
    """Linear layers as models write them: with GELU, ReLU, tanh-GELU (stays apart), no bias, an output used twice
    (its activation stays apart), a weight tied to an embedding and one computed in the graph (both stay ATen's)."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(24, 40)
        self.down = torch.nn.Linear(40, 24, bias=False)
        self.relu = torch.nn.Linear(24, 24)
        self.tanh = torch.nn.Linear(24, 33)
        self.embed = torch.nn.Embedding(10, 24)
        self.head = torch.nn.Linear(24, 10)
        self.head.weight = self.embed.weight
        self.scaled = torch.nn.Parameter(torch.randn(24, 24))

    def forward(self, x, ids):
        h = self.down(F.gelu(self.up(x)))
        r = self.relu(h)
        twice = r + F.relu(r)
        t = F.gelu(self.tanh(h), approximate="tanh")
        return twice, t, self.head(self.embed(ids)), F.linear(h, self.scaled * 2)


def calls(ep):
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


def test_the_rewritten_graph_gives_the_eager_answer():
    model = Layers().eval()
    x, ids = torch.randn(2, 7, 24), torch.randint(0, 10, (2, 7))
    batch = torch.export.Dim("batch", min=1, max=8)
    dims = {"x": {0: batch, 1: torch.export.Dim("length", min=2, max=64)}, "ids": {0: batch}}
    ep = linear.fuse(torch.export.export(model, (x, ids), dynamic_shapes=dims, strict=False))
    names = calls(ep)
    assert names.count("pt2rt.linear.default") == 4  # up (+ GELU), down, relu, tanh
    assert names.count("aten.linear.default") == 2  # the tied head, the computed weight
    acts = sorted(n.args[4] for n in ep.graph.nodes if str(n.target) == "pt2rt.linear.default")
    assert acts == ["gelu", "none", "none", "none"]
    assert names.count("aten.gelu.default") == 1 and names.count("aten.relu.default") == 1
    for shape in ((2, 7, 24), (1, 37, 24), (5, 3, 24)):
        x = torch.randn(shape)
        with torch.no_grad():
            some = ids[:1].expand(shape[0], 7)
            for got, expected in zip(ep.module()(x, some), model(x, some)):
                torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_layers_oneDNN_packs_stay_atens(monkeypatch):
    """On an AVX-512 machine the native variant packs static-row linear layers for oneDNN (export_tools.passes):
    those stay ATen's; dynamic rows are the kernel's on any machine."""
    monkeypatch.setattr(passes, "onednn_class", lambda features=None: "avx512")
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()).eval()
    x = torch.randn(4, 8)
    static = linear.fuse(torch.export.export(model, (x,), strict=False))
    assert "pt2rt.linear.default" not in calls(static) or not torch.backends.mkldnn.is_available()
    # a package of variants oneDNN packs nothing for (portable ones below AVX-512, lite's): the kernel's
    for variants, rewritten in ((["default"], 1), (["avx2", "default"], 1), (["avx512", "avx2"], 0)):
        ep = linear.fuse(torch.export.export(model, (x,), strict=False), variants)
        assert calls(ep).count("pt2rt.linear.default") == (rewritten or not torch.backends.mkldnn.is_available())
    dims = {"input": {0: torch.export.Dim("batch", min=1, max=8)}}
    dynamic = linear.fuse(torch.export.export(model, (x,), dynamic_shapes=dims, strict=False))
    assert calls(dynamic).count("pt2rt.linear.default") == 1


def test_layers_of_many_rows_and_features_stay_atens():
    """Past MAX_ROWS rows at the example's sizes and ONE_BLOCK_FEATURES features MKL's product is as fast: those
    layers stay ATen's; of fewer features they are the kernel's at any row count."""
    dims = {"input": {0: torch.export.Dim("batch", min=1, max=4096)}}
    deep, shallow = linear.ONE_BLOCK_FEATURES + 1, linear.ONE_BLOCK_FEATURES
    for features, rows, rewritten in ((deep, linear.MAX_ROWS, 1), (deep, linear.MAX_ROWS + 1, 0),
                                      (shallow, linear.MAX_ROWS + 1, 1), (shallow, 4 * linear.MAX_ROWS, 1)):
        model = torch.nn.Sequential(torch.nn.Linear(features, 16), torch.nn.GELU()).eval()
        ep = linear.fuse(torch.export.export(model, (torch.randn(rows, features),), dynamic_shapes=dims, strict=False))
        assert calls(ep).count("pt2rt.linear.default") == rewritten, (features, rows)


class SharedWeight(torch.nn.Module):
    """One layer applied to few rows and to many deep ones."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(linear.ONE_BLOCK_FEATURES + 1, 8)

    def forward(self, few, many):
        return self.layer(few), self.layer(many)


def test_a_weight_stays_whole_where_one_of_its_layers_stays_atens(monkeypatch):
    """A weight is laid out in panels only where every layer using it is rewritten: else it would be stored twice."""
    monkeypatch.setattr(passes, "onednn_class", lambda features=None: "avx2")  # no layer left to oneDNN's packing
    model, k = SharedWeight().eval(), linear.ONE_BLOCK_FEATURES + 1
    few, many = torch.randn(4, k), torch.randn(linear.MAX_ROWS + 1, k)
    ep = linear.fuse(torch.export.export(model, (few, few), strict=False))
    assert calls(ep).count("pt2rt.linear.default") == 2
    ep = linear.fuse(torch.export.export(model, (few, many), strict=False))
    assert calls(ep).count("pt2rt.linear.default") == 0 and calls(ep).count("aten.linear.default") == 2


def test_panels_are_laid_out_after_the_graphs_inputs(monkeypatch):
    """The panels' nodes come before their first layer, after every placeholder (inputs first, as FX expects)."""
    monkeypatch.setattr(passes, "onednn_class", lambda features=None: "avx2")
    ep = linear.fuse(torch.export.export(Layers().eval(), (torch.randn(2, 7, 24), torch.randint(0, 10, (2, 7))),
                                         strict=False))
    ops = [n.op for n in ep.graph.nodes]
    assert "placeholder" not in ops[ops.index("call_function"):]
    first = next(n for n in ep.graph.nodes if str(n.target) == "pt2rt.linear.default")
    pad = first.args[1].args[0].args[0].args[0]
    assert pad.target is torch.ops.aten.constant_pad_nd.default and pad.next.next.next.next is first


def test_the_kernel_of_every_isa_gives_the_same_answer():
    """Compiled per ISA and chosen once per process: each one this CPU runs."""
    from test_depthwise import run_in_each_isa
    run_in_each_isa("test_linear", "t.linear.register()\n"
                                   "for s in t.SHAPES: t.test_the_kernel_gives_the_products_and_eagers_activations(s)\n"
                                   "t.test_sums_in_input_order_as_the_pointwise_kernel()\n"
                                   "t.test_gelu_as_eager_at_the_ends_of_its_range()\n")
