"""my_ops.identity_conv_op and my_ops.depthwise_conv2d from Python: values, layouts, fakes, opcheck."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

op = torch.ops.my_ops.identity_conv_op

SHAPES = [(2, 3, 16, 16), (1, 1, 1, 1), (4, 8, 7, 5), (3, 2, 1, 9), (0, 3, 4, 4)]


def layouts(x):
    """The same values in the layouts a caller may pass: contiguous, channels_last, dense-permuted, sliced."""
    big = torch.randn(x.shape[0], x.shape[1], 2 * x.shape[2] + 1, x.shape[3] + 2, dtype=x.dtype, device=x.device)
    return {
        "contiguous": x,
        "channels_last": x.contiguous(memory_format=torch.channels_last),
        "permuted": x.transpose(2, 3).contiguous().transpose(2, 3),
        "sliced": big[:, :, 1::2, 1:-1],
    }


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_identity_equals_input_in_every_layout(shape, dtype, device):
    x = torch.randn(shape, device=device).to(dtype)
    for name, xi in layouts(x).items():
        y = op(xi)
        assert y.dtype == xi.dtype and y.shape == xi.shape and y.device == xi.device, name
        torch.testing.assert_close(y, xi, rtol=0, atol=0, msg=name)
        if xi.numel():
            assert y.data_ptr() != xi.data_ptr(), f"{name}: output aliases the input"
        y.fill_(1)  # the output is its own memory
        assert not torch.equal(xi, y) or xi.numel() == 0 or bool((xi == 1).all())


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "permuted", "sliced"])
def test_fake_strides_match_real(layout, device):
    x = layouts(torch.randn(2, 3, 5, 6, device=device))[layout]
    real = op(x)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = op(mode.from_tensor(x))
    assert fake.shape == real.shape
    assert fake.stride() == real.stride(), f"fake strides {fake.stride()} != real {real.stride()}"
    assert fake.dtype == real.dtype


def test_fake_depthwise_matches_real(device):
    x = torch.randn(2, 4, 5, 6, device=device).contiguous(memory_format=torch.channels_last)
    w = torch.randn(4, 1, 3, 3, device=device)
    real = torch.ops.my_ops.depthwise_conv2d(x, w)
    with FakeTensorMode() as mode:
        fake = torch.ops.my_ops.depthwise_conv2d(mode.from_tensor(x), mode.from_tensor(w))
    assert (fake.shape, fake.stride(), fake.dtype) == (real.shape, real.stride(), real.dtype)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
def test_opcheck_identity(layout, dtype, device):
    x = layouts(torch.randn(2, 3, 6, 7, device=device).to(dtype))[layout]
    torch.library.opcheck(op, (x,))


def test_opcheck_depthwise(dtype, device):
    x = torch.randn(2, 3, 6, 7, device=device).to(dtype)
    w = torch.randn(3, 1, 5, 5, device=device)
    torch.library.opcheck(torch.ops.my_ops.depthwise_conv2d, (x, w))


@pytest.mark.parametrize("bad, message", [
    (lambda: torch.randn(3, 4, 5), "expected a 4-D NCHW tensor, got a 3-D tensor of shape [3, 4, 5]"),
    (lambda: torch.randn(1, 2, 3, 4, 5), "got a 5-D tensor"),
    (lambda: torch.ones(1, 1, 2, 2, dtype=torch.int64), "expected dtype float32, float64, float16 or bfloat16, got Long"),
    (lambda: torch.ones(1, 1, 2, 2, dtype=torch.bool), "got Bool"),
    (lambda: torch.ones(1, 1, 2, 2, dtype=torch.complex64), "got ComplexFloat"),
])
def test_identity_rejects_bad_input(bad, message, device):
    with pytest.raises(RuntimeError, match=__import__("re").escape(message)):
        op(bad().to(device))


def test_depthwise_rejects_bad_weight():
    x = torch.randn(1, 3, 4, 4)
    with pytest.raises(RuntimeError, match=r"expected a depthwise weight of shape \(3, 1, k, k\) with k odd in 1..7, "
                                           r"got shape \[3, 1, 4, 4\]"):
        torch.ops.my_ops.depthwise_conv2d(x, torch.randn(3, 1, 4, 4))
    with pytest.raises(RuntimeError, match=r"got shape \[2, 1, 3, 3\]"):
        torch.ops.my_ops.depthwise_conv2d(x, torch.randn(2, 1, 3, 3))
