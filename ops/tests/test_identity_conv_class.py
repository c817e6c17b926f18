"""my_ops.IdentityConvClass from Python: values against F.conv2d, state, pickling, errors."""

import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

Conv = torch.classes.my_ops.IdentityConvClass

# Half precision: the kernel sums k*k products in float32 and rounds once; the reference rounds once too.
TOL = {
    torch.float32: dict(rtol=1.3e-6, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.float16: dict(rtol=1e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2),
}


def reference(x, weight):
    """Depthwise conv in float64 from the same input values, rounded to the input's dtype."""
    k = weight.shape[-1]
    out = F.conv2d(x.double().cpu(), weight.double().cpu(), padding=k // 2, groups=x.shape[1])
    return out.to(x.dtype).to(x.device)


@pytest.mark.parametrize("k", [1, 3, 5, 7])
def test_default_weight_is_identity(k, dtype, device):
    conv = Conv(4, k)
    assert conv.channels() == 4 and conv.kernel_size() == k
    x = torch.randn(2, 4, 9, 10, device=device).to(dtype)
    torch.testing.assert_close(conv.forward(x), x, rtol=0, atol=0)


@pytest.mark.parametrize("k", [1, 3, 5, 7])
# Widths cover every vector block and tail of the row kernels and every strip shape of the AVX-512 plane kernels
# (49, 65: a last vector with fewer columns than k // 2 for some k); 40x700 splits a plane between two tasks.
@pytest.mark.parametrize("hw", [(13, 17), (3, 2), (1, 1), (5, 24), (9, 31), (4, 56), (3, 49), (33, 70), (5, 65),
                                (40, 700)],
                         ids=lambda s: "x".join(map(str, s)))
def test_forward_matches_depthwise_conv2d(k, hw, dtype, device):
    C = 6
    conv = Conv(C, k)
    weight = torch.randn(C, 1, k, k)
    conv.set_weight(weight)
    x = torch.randn(3, C, *hw, device=device).to(dtype)
    expected = reference(x, weight)
    for xi in (x, x.contiguous(memory_format=torch.channels_last), x.transpose(2, 3).contiguous().transpose(2, 3)):
        out = conv.forward(xi)
        assert out.is_contiguous() and out.device == x.device
        torch.testing.assert_close(out, expected, **TOL[dtype])


BASELINE = r"""
import sys, torch
import my_ops
torch.manual_seed(0)
outs = []
for k in (1, 3, 5, 7):
    for hw in ((13, 17), (4, 56), (9, 31), (33, 70), (40, 700)):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            conv = torch.classes.my_ops.IdentityConvClass(6, k)
            w = torch.randn(6, 1, k, k)
            conv.set_weight(w)
            x = torch.randn(3, 6, *hw).to(dtype)
            outs.append((x, w, conv.forward(x)))
# float32 denormal sums: the AVX512-BF16 rounding instruction flushes them to zero
conv = torch.classes.my_ops.IdentityConvClass(6, 1)
x = torch.full((1, 6, 2, 20), 3e-39).to(torch.bfloat16)
outs.append((x, conv.get_weight(), conv.forward(x)))
torch.save(outs, sys.argv[1])
"""


def _host_has(*flags):
    with open("/proc/cpuinfo") as f:
        have = set(next(line for line in f if line.startswith("flags")).split())
    return all(flag in have for flag in flags)


# ATEN_CPU_CAPABILITY -> the CPU flags the kernels it selects need (/proc/cpuinfo names); unset, the library takes
# its best, which is the AVX512-BF16 variant only where the CPU has it (avx512 caps at x86-64-v4).
KERNEL_VARIANTS = {"default": (), "avx2": ("avx2", "fma"), "avx512": ("avx512f", "avx512dq", "avx512vl", "avx512bw"),
                   None: ("avx512f", "avx512dq", "avx512vl", "avx512bw", "avx512_bf16")}


@pytest.fixture(scope="module")
def kernel_outputs(tmp_path_factory):
    """Each row-kernel variant this CPU can execute, forced with ATEN_CPU_CAPABILITY (chosen once per process, so
    in a process of its own): variant -> [(x, weight, output)]."""
    outs = {}
    for variant, flags in KERNEL_VARIANTS.items():
        if not _host_has(*flags):
            continue
        out = tmp_path_factory.mktemp("kernels") / f"{variant}.pt"
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if variant is not None:
            env["ATEN_CPU_CAPABILITY"] = variant
        result = subprocess.run([sys.executable, "-c", BASELINE, str(out)], capture_output=True, text=True,
                                timeout=300, env=env)
        assert result.returncode == 0, result.stderr
        outs[variant] = torch.load(out)
    return outs


@pytest.mark.parametrize("variant", list(KERNEL_VARIANTS), ids=lambda v: v or "avx512_bf16")
def test_each_cpu_kernel_variant_matches_the_reference(kernel_outputs, variant):
    if variant not in kernel_outputs:
        pytest.skip(f"needs a CPU with {', '.join(KERNEL_VARIANTS[variant])} to run the {variant or 'avx512_bf16'} "
                    "kernels")
    for x, w, out in kernel_outputs[variant]:
        torch.testing.assert_close(out, reference(x, w), **TOL[x.dtype])


def test_the_bfloat16_variant_rounds_like_the_avx512_one(kernel_outputs):
    """The AVX512-BF16 variant differs from the AVX-512 one in its bfloat16 rounding instruction only: the same
    bits out, except that float32 denormal sums become zero (which also shows it is other code)."""
    if None not in kernel_outputs:
        pytest.skip("needs a CPU with avx512_bf16 to run the AVX512-BF16 kernels")
    pairs = list(zip(kernel_outputs["avx512"], kernel_outputs[None]))
    flushed = 0
    for p, q in pairs:
        tiny = p[2].float().abs() < torch.finfo(torch.float32).tiny
        torch.testing.assert_close(q[2][~tiny], p[2][~tiny], rtol=0, atol=0)
        assert torch.all(q[2][tiny & (p[2] != 0)] == 0)
        flushed += int((tiny & (p[2] != 0)).sum())
    assert flushed > 0


def test_the_kernel_variants_are_different_code(kernel_outputs):
    """Forcing a variant runs other code: its float32 results differ in the last bits from each other variant's
    (vector width and FMA change the summation order), so the switch is not a no-op."""
    if len(kernel_outputs) < 2:
        pytest.skip("needs a CPU with AVX2 to have two kernel variants")
    names = [name for name in kernel_outputs if name is not None]  # the bfloat16 variant: the test above
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pairs = zip(kernel_outputs[a], kernel_outputs[b])
            assert any(not torch.equal(p[2], q[2]) for p, q in pairs if p[0].dtype == torch.float32), (a, b)


def test_weight_dtype_is_kept_and_used(device):
    conv = Conv(2, 3)
    weight = torch.randn(2, 1, 3, 3, dtype=torch.float64)
    conv.set_weight(weight)
    assert conv.get_weight().dtype == torch.float64
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, device=device)
    torch.testing.assert_close(conv.forward(x), reference(x, weight))


def test_get_weight_is_a_copy():
    conv = Conv(2, 3)
    conv.get_weight().fill_(5.0)
    x = torch.randn(1, 2, 4, 4)
    torch.testing.assert_close(conv.forward(x), x, rtol=0, atol=0)


def test_set_weight_copies_the_argument():
    conv = Conv(2, 3)
    w = torch.randn(2, 1, 3, 3)
    kept = w.clone()
    conv.set_weight(w)
    w.zero_()
    torch.testing.assert_close(conv.get_weight(), kept, rtol=0, atol=0)  # the new weight, not the default, not zeros


def test_pickle_round_trip_keeps_weight_and_behaviour():
    conv = Conv(3, 5)
    weight = torch.randn(3, 1, 5, 5)
    conv.set_weight(weight)
    restored = torch._C._pickle_load_obj(torch._C._pickle_save(conv))
    torch.testing.assert_close(restored.get_weight(), weight, rtol=0, atol=0)
    assert restored.kernel_size() == 5 and restored.channels() == 3
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(restored.forward(x), conv.forward(x), rtol=0, atol=0)


def test_obj_flatten_exposes_the_weight():
    """What torch.export traces the object by: the weight it computes with, not a stale or default one."""
    conv = Conv(2, 3)
    flat = conv.__obj_flatten__()
    assert [name for name, _ in flat] == ["weight"]
    torch.testing.assert_close(flat[0][1], conv.get_weight(), rtol=0, atol=0)
    weight = torch.randn(2, 1, 3, 3)
    conv.set_weight(weight)
    torch.testing.assert_close(conv.__obj_flatten__()[0][1], weight, rtol=0, atol=0)


@pytest.mark.parametrize("make, message", [
    (lambda: Conv(3, 4), "expected an odd kernel_size in 1..7, got 4"),
    (lambda: Conv(3, 9), "expected an odd kernel_size in 1..7, got 9"),
    (lambda: Conv(3, 0), "got 0"),
    (lambda: Conv(0, 3), "expected channels >= 1, got 0"),
    (lambda: Conv(3).forward(torch.randn(1, 4, 5, 5)), "expected an input with 3 channels (dim 1), got shape [1, 4, 5, 5]"),
    (lambda: Conv(3).forward(torch.randn(3, 5, 5)), "expected a 4-D NCHW tensor, got a 3-D tensor"),
    (lambda: Conv(3).forward(torch.ones(1, 3, 5, 5, dtype=torch.int32)), "got Int"),
    (lambda: Conv(3).set_weight(torch.randn(3, 1, 5, 5)), "expected a weight of shape [3, 1, 3, 3], got [3, 1, 5, 5]"),
    (lambda: Conv(3).set_weight(torch.randn(3, 3, 3)), "expected a weight of shape [3, 1, 3, 3], got [3, 3, 3]"),
    (lambda: Conv(3).set_weight(torch.ones(3, 1, 3, 3, dtype=torch.int64)), "got Long"),
])
def test_bad_arguments_raise_clear_errors(make, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        make()


def test_default_kernel_size_is_three():
    assert Conv(2).kernel_size() == 3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("k", [1, 3, 5, 7])
def test_cuda_kernel_matches_cpu_kernel(k, dtype):
    C = 16
    conv = Conv(C, k)
    conv.set_weight(torch.randn(C, 1, k, k))
    x = torch.randn(4, C, 33, 47).to(dtype)
    torch.testing.assert_close(conv.forward(x.cuda()).cpu(), conv.forward(x), **TOL[dtype])
    y = torch.ops.my_ops.identity_conv_op(x.cuda().contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(y.cpu(), x, rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_kernel_covers_more_planes_than_one_grid_dimension_holds():
    C = 40000  # 2 x 40000 planes: past 65535, the kernel's grid loops over them
    conv = Conv(C, 3)
    conv.set_weight(torch.randn(C, 1, 3, 3))
    x = torch.randn(2, C, 3, 5)
    torch.testing.assert_close(conv.forward(x.cuda()).cpu(), conv.forward(x), rtol=1e-5, atol=1e-5)


def test_the_fake_class_has_every_method_of_the_real_one():
    """A method missing from the fake makes tracing warn ("fake object ... doesn't implement method ...")."""
    from torch._library import fake_class_registry
    qualified = "__torch__.torch.classes.my_ops.IdentityConvClass"
    fake = fake_class_registry.find_fake_class(qualified)
    assert fake is not None
    methods = {s.name for s in torch._C._jit_get_custom_class_schemas()
               if s.arguments and str(s.arguments[0].type) == qualified}
    missing = sorted(m for m in methods - {"__init__", "__getstate__", "__setstate__", "__obj_flatten__"}
                     if not hasattr(fake, m))
    assert methods and not missing, missing
