"""Attention as pt2rt's kernel (export_tools.attention, libpt2rt_kernels.so's pt2rt::attention): the kernel against
torch's scaled_dot_product_attention, the graph rewrite against the eager model, without compiling (test_lite.py
compiles a package whose attention goes through it, in the full and the lite runtime)."""

import pytest
import torch
import torch.nn.attention

from export_tools import attention, libraries, recurrent

F = torch.nn.functional
# batch, heads, query rows, key rows, features of q and k, of v: whole blocks of 6 rows and the last 1-5, keys past
# whole vectors, features past whole vectors (a column tail), a single key, a single row
SHAPES = [(1, 3, 197, 197, 64, 64), (2, 2, 13, 17, 8, 8), (1, 1, 7, 33, 80, 48), (3, 2, 5, 1, 7, 9),
          (1, 4, 1, 40, 16, 20), (2, 1, 24, 24, 3, 1), (1, 2, 12, 130, 32, 32)]


@pytest.fixture(scope="module", autouse=True)
def kernels():
    path = recurrent.find_library()
    assert path is not None, f"{recurrent.LIBRARY_NAME} not found: build first or set {recurrent.ENV_VAR}"
    libraries.load_ops_library(path)
    assert recurrent.load_kernels() and attention.register()


def heads(b, h, lq, lk, d, dv, seed=0):
    """q, k and v as a projection's output makes them: views of one [B, L, 3, H, D] tensor (v narrower)."""
    torch.manual_seed(seed)
    qkv = torch.randn(b, max(lq, lk), 3, h, max(d, dv)).permute(2, 0, 3, 1, 4)
    return qkv[0, :, :, :lq, :d], qkv[1, :, :, :lk, :d], qkv[2, :, :, :lk, :dv]


def reference(q, k, v, scale):
    """softmax(q k^T scale) v in float64."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    return (torch.softmax(s, -1) @ v.double()).float()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_kernel_gives_torchs_answer(shape):
    q, k, v = heads(*shape)
    scale = shape[4] ** -0.5
    got = torch.ops.pt2rt.attention(q, k, v, scale)
    assert got.shape == (*q.shape[:3], v.shape[3]) and got.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(got, reference(q, k, v, scale), rtol=1e-5, atol=1e-5)
    if v.shape[3] == q.shape[3]:
        torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v), rtol=1e-5, atol=1e-5)
    # contiguous inputs, and rows with a stride in their last dim (copied), give the same bits
    assert torch.equal(torch.ops.pt2rt.attention(q.contiguous(), k.contiguous(), v.contiguous(), scale), got)
    strided = torch.ops.pt2rt.attention(q, k.repeat_interleave(2, -1)[..., ::2], v, scale)
    assert torch.equal(strided, got)


def test_scores_far_apart_and_a_given_scale():
    q, k, v = heads(2, 3, 20, 30, 16, 16, seed=1)
    for scale in (40.0, 1e-3, -2.0):  # a softmax near one-hot, near uniform, and reversed
        torch.testing.assert_close(torch.ops.pt2rt.attention(q, k, v, scale), reference(q, k, v, scale),
                                   rtol=1e-5, atol=1e-5)
    # every score of every row near -160, past e^x's range (and below the padded keys' place past 30): shifted by the
    # row's max (float32's rounding of scores that large: ~1e-5 of them)
    q, k = torch.full_like(q, -10.0), 1 + 0.05 * torch.randn_like(k)
    torch.testing.assert_close(torch.ops.pt2rt.attention(q, k, v, 1.0), reference(q, k, v, 1.0), rtol=1e-4, atol=1e-4)


def test_heads_shared_by_broadcast():
    """k and v expanded over the batch and heads (stride 0), as a model sharing one key / value head writes them."""
    q, k, v = heads(3, 4, 9, 11, 8, 8)
    k1, v1 = k[:1, :1].expand_as(k), v[:1, :1].expand_as(v)
    torch.testing.assert_close(torch.ops.pt2rt.attention(q, k1, v1, 0.5), reference(q, k1, v1, 0.5),
                               rtol=1e-5, atol=1e-5)


def test_no_keys_gives_zeros_as_torch():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 0, 8), torch.randn(2, 3, 0, 5)
    got = torch.ops.pt2rt.attention(q, k, v, 0.3)
    assert got.shape == (2, 3, 4, 5) and torch.equal(got, torch.zeros(2, 3, 4, 5))
    assert torch.ops.pt2rt.attention(torch.randn(1, 2, 0, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 3),
                                     1.0).shape == (1, 2, 0, 3)


def test_non_finite_values_reach_the_outputs_they_reach_in_torch():
    q, k, v = (t.contiguous() for t in heads(1, 2, 14, 15, 8, 8, seed=2))
    q[0, 0, 3, 2] = float("nan")   # one row's scores all NaN
    k[0, 1, 4, 0] = float("inf")   # every row of head 1 meets +inf or -inf (q's sign)
    v[0, 0, 7, 5] = float("-inf")  # one column of head 0
    q[0, 0, 9] = -1e30             # a row with one score far above the others: a one-hot softmax
    got = torch.ops.pt2rt.attention(q, k, v, 8 ** -0.5)
    # torch's math attention: its flash kernel's AVX-512 code gives 0 where a row's scores are all NaN
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        expected = F.scaled_dot_product_attention(q, k, v)
    assert expected.isnan().any() and expected.isinf().any() and expected.isfinite().any()
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.isinf(), expected.isinf())
    finite = expected.isfinite()
    torch.testing.assert_close(got[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_rows_past_e_to_the_x_as_torch():
    """A row of -inf scores only gives 0 (NaN where it meets inf), a key far below the row's best weighs 0 (not e^x's
    clamp), an infinite scale gives what torch gives."""
    inf = float("inf")
    sdpa = F.scaled_dot_product_attention
    ones = torch.ones(1, 1, 2, 1)
    q = torch.full((1, 1, 1, 1), -inf)
    for v in (ones, torch.tensor([[[[1.0], [inf]]]])):
        got, expected = torch.ops.pt2rt.attention(q, ones, v, 1.0), sdpa(q, ones, v)
        assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.nan_to_num(), expected.nan_to_num())
    q, k = torch.ones(1, 1, 1, 1), torch.tensor([[[[0.0], [-200.0]]]])
    for v in (torch.tensor([[[[0.0], [1e38]]]]), torch.tensor([[[[0.0], [inf]]]])):
        got, expected = torch.ops.pt2rt.attention(q, k, v, 1.0), sdpa(q, k, v)
        assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.nan_to_num(), expected.nan_to_num())
    q, k, v = torch.ones(1, 1, 2, 2), torch.tensor([[[[1.0, 1.0], [-1.0, -1.0]]]]), torch.ones(1, 1, 2, 2)
    for scale in (inf, 1e39):
        got, expected = torch.ops.pt2rt.attention(q, k, v, scale), sdpa(q, k, v, scale=scale)
        assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.nan_to_num(), expected.nan_to_num())


def test_every_thread_count_gives_the_same_bits():
    """Pieces are whole blocks of rows, and a row's sums run in one order whatever piece it is in."""
    q, k, v = heads(2, 3, 197, 197, 64, 64, seed=3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.ops.pt2rt.attention(q, k, v, 0.125)
        torch.set_num_threads(2)
        two = torch.ops.pt2rt.attention(q, k, v, 0.125)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


@pytest.mark.parametrize("args, message", [
    ((torch.randn(2, 3, 4, 8, dtype=torch.float64),) * 3, "expected float32 q, k and v"),
    ((torch.randn(3, 4, 8),) * 3, r"expected q \[B, H, L_q, D\]"),
    ((torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 7), torch.randn(1, 2, 5, 8)), "do not agree"),
    ((torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 6, 8)), "do not agree"),
    ((torch.randn(1, 2, 4, 8), torch.randn(1, 3, 5, 8), torch.randn(1, 3, 5, 8)), "do not agree"),
])
def test_bad_arguments_are_named(args, message):
    with pytest.raises(RuntimeError, match=message):
        torch.ops.pt2rt.attention(*args, 1.0)


class Block(torch.nn.Module):
    """Attention as models write it: a batch-first nn.MultiheadAttention (scaled_dot_product_attention inside), one
    with a mask and one causal (both stay ATen's), and one with its own scale."""

    def __init__(self):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
        self.proj = torch.nn.Linear(32, 96)

    def forward(self, x):
        y = self.mha(x, x, x, need_weights=False)[0]
        q, k, v = self.proj(y).view(x.shape[0], x.shape[1], 3, 4, 8).permute(2, 0, 3, 1, 4)
        mask = (x[..., :1] @ x[..., :1].transpose(1, 2)).unsqueeze(1) * 0.1  # [B, 1, L, L]
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        scaled = F.scaled_dot_product_attention(q, k, v, scale=0.3)
        return y, masked + causal + scaled


def test_the_rewritten_graph_gives_the_eager_answer():
    model = Block().eval()
    x = torch.randn(2, 10, 32)
    dims = {"x": {0: torch.export.Dim("batch", min=1, max=8), 1: torch.export.Dim("length", min=2, max=64)}}
    ep = attention.fuse(torch.export.export(model, (x,), dynamic_shapes=dims, strict=False))
    calls = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert calls.count("pt2rt.attention.default") == 2  # the module's and the scaled one
    assert calls.count("aten.scaled_dot_product_attention.default") == 2  # masked, causal
    scales = sorted(n.args[3] for n in ep.graph.nodes if str(n.target) == "pt2rt.attention.default")
    assert scales == pytest.approx([0.3, 8 ** -0.5])
    for shape in ((2, 10, 32), (1, 37, 32), (5, 3, 32)):
        x = torch.randn(shape)
        with torch.no_grad():
            for got, expected in zip(ep.module()(x), model(x)):
                torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_the_kernel_of_every_isa_gives_torchs_answer():
    """Compiled per ISA and chosen once per process: each one this CPU runs."""
    from test_depthwise import run_in_each_isa
    run_in_each_isa("test_attention", "t.attention.register()\n"
                                      "for s in t.SHAPES: t.test_the_kernel_gives_torchs_answer(s)\n"
                                      "t.test_non_finite_values_reach_the_outputs_they_reach_in_torch()\n")
