"""Depthwise, pointwise and 3x3 convolutions as calls of pt2rt's own kernels (`pt2rt::depthwise_conv2d`,
`pt2rt::pointwise_conv2d`, `pt2rt::winograd_conv2d`, libpt2rt_kernels.so).

oneDNN, which ATen's CPU convolutions call, sets each depthwise convolution up anew on every call (descriptors,
attributes, its primitive cache), and on small images its kernel is no faster than a plain blocked loop.
`fuse(ep)` rewrites each 2-d depthwise convolution of a CPU float32 graph (one filter per channel, no channel
multiplier: groups = in = out channels; an input of at most MAX_INPUT_BYTES) into the kernel's call on the same
input, bias and geometry, its weight laid out as the kernel reads it ([kh, kw, C], folded into a constant with the
others). The kernel returns
channels-last outputs and takes channels-last inputs (inductor is told so: no copy between it and its neighbours,
which inductor keeps channels-last around convolutions); each output sums its taps in order, taps in the padding
skipped as oneDNN skips them, so inf and NaN reach the same outputs as in eager. docs/export.md has the numbers.

A pointwise convolution (1x1, stride 1, no padding, one group) and what follows it alone - an eval-mode batch norm,
then ReLU, ReLU6 (hardtanh 0..6), hardswish, hardsigmoid, SiLU or sigmoid - become one call: the batch norm folded
into the weight and bias (as inductor's freezing folds it into a convolution), the weight laid out [C_in, C_out]
padded to 16 columns, the activation applied in registers before the output is stored. ATen's form is MKL's product
plus a pass of inductor's over its output for the bias and the activation. A depthwise convolution takes what follows
it alone the same way (`pt2rt::depthwise_conv2d_act`: the batch norm folded into its taps and bias, the activation
applied to each output row while the row is in L1) instead of a pass of inductor's over the whole image.
A 3x3 convolution (stride 1, no dilation, one group) of WINOGRAD_MIN_CHANNELS or more channels in and out, at most
WINOGRAD_MAX_PRODUCT channel pairs and an output of WINOGRAD_MIN_OUTPUTS positions or more, takes what follows it alone
the same way and becomes `pt2rt::winograd_conv2d`: Winograd's F(2x2, 3x3), 16 multiply-adds per input channel for
each 2x2 outputs where oneDNN's direct convolution does 36 (runtime/kernels/winograd.h). Its weight is transformed
here (in float64, then rounded; only where the weights are folded into constants, optimize="fold"), and the taps are
kept beside it for the tiles it computes directly (inf or NaN in their inputs: they reach the outputs they reach in
eager). Outputs differ from eager's by rounding only (within
~5e-7 of the output's largest value on ResNet-like layers, less than oneDNN's own); the weights take 16/9 + 1 of
their size, hence the bound on channel pairs.
Without the kernels library the convolutions stay ATen's (export_tools.recurrent says where it is looked for).
"""

from __future__ import annotations

import logging

import torch

from . import recurrent

aten = torch.ops.aten
log = logging.getLogger("export_tools")

OP = "pt2rt::depthwise_conv2d"
ACT_OP = "pt2rt::depthwise_conv2d_act"
POINTWISE_OP = "pt2rt::pointwise_conv2d"
WINOGRAD_OP = "pt2rt::winograd_conv2d"
# Inputs past this many bytes (at the example's sizes where a dim is dynamic) stay oneDNN's: on large images the
# kernel is memory-bound and oneDNN moves less (EfficientNet-B0 at batch 8, one thread, AMD EPYC: its 96 x 112 x 112
# stride-2 convolution, 38 MB, 1.8-2.0x oneDNN's time; 6-13 MB ones 0.75-1.1x, every one at batch 1 0.6-1.0x), and
# there oneDNN's set-up is a small part of the call.
MAX_INPUT_BYTES = 8 << 20
# Where Winograd wins over oneDNN's packed direct convolution (AMD EPYC Zen 3, AVX2, docs/performance.md): from
# 32 channels in and out (16 -> 16 on 112 x 112: 1.6x oneDNN's time, 32 -> 64 on 56 x 56: 0.77x); up to 256 x 256
# channels (its weights are 16/9 + 1 of the convolution's: the package's size) and from a 6 x 6 output (256 x 256 on
# 2 x 2: 1.5x; 512 x 512 on 7 x 7: 0.75x)
WINOGRAD_MIN_CHANNELS = 32
WINOGRAD_MAX_PRODUCT = 256 * 256
WINOGRAD_MIN_OUTPUTS = 36
# What the transformed weights may add to the package at most (16 x C_in x C_out floats each, the taps replacing the
# convolution's weight): this part of the model's weights plus this many bytes, so that a package stays within 1.5x
# its weights plus 10 MB with room for its code and golden cases; past it the convolutions that gain the most per
# byte go first (most outputs per weight). ResNet-34's 87 MB of weights: 92 -> 130 MB
WINOGRAD_EXTRA_FRACTION = 0.4
WINOGRAD_EXTRA_BYTES = 4 << 20
# columns the pointwise kernel's weight rows are padded to (runtime/kernels/pointwise.h's kPointwiseColumnAlign)
COLUMN_ALIGN = 16


def _conv_args(node: torch.fx.Node) -> tuple | None:
    """(x, weight, bias, stride, padding, dilation, groups) of a 2-d convolution node, None for anything else
    (transposed, 1-d / 3-d, padding given as a string)."""
    if node.op != "call_function":
        return None
    if node.target is aten.conv2d.default:
        names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
        defaults = (None, None, None, [1, 1], [0, 0], [1, 1], 1)
        args = [node.args[i] if i < len(node.args) else node.kwargs.get(n, d)
                for i, (n, d) in enumerate(zip(names, defaults))]
        return tuple(args)
    if node.target is aten.convolution.default:
        x, w, b, stride, padding, dilation, transposed, _output_padding, groups = node.args
        return None if transposed else (x, w, b, stride, padding, dilation, groups)
    return None


def _pair(v) -> list[int] | None:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    v = v * 2 if len(v) == 1 else v
    return v if len(v) == 2 and all(isinstance(i, int) for i in v) else None


def example_numel(t: torch.Tensor | torch.Size) -> int:
    """t's elements (or a shape's) at the example's sizes (a dynamic dim's hint; one without a hint counts as past
    any limit)."""
    n = 1
    for d in (t if isinstance(t, torch.Size) else t.shape):
        hint = d if isinstance(d, int) else getattr(getattr(d, "node", None), "hint", None)
        if hint is None:
            return 1 << 62
        n *= int(hint)
    return n


def _depthwise(node: torch.fx.Node) -> bool:
    args = _conv_args(node)
    if args is None:
        return False
    x, w, b, stride, padding, dilation, groups = args
    if not all(isinstance(t, torch.fx.Node) and isinstance(t.meta.get("val"), torch.Tensor) for t in (x, w)):
        return False
    if b is not None and not (isinstance(b, torch.fx.Node) and isinstance(b.meta.get("val"), torch.Tensor)):
        return False
    xv, wv = x.meta["val"], w.meta["val"]
    tensors = [xv, wv] + ([b.meta["val"]] if b is not None else [])
    if not all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors):
        return False
    if xv.dim() != 4 or wv.dim() != 4 or not all(_pair(v) is not None for v in (stride, padding, dilation)):
        return False
    channels = wv.shape[0]
    if example_numel(xv) * xv.element_size() > MAX_INPUT_BYTES:
        return False
    return (isinstance(groups, int) and groups > 1 and isinstance(channels, int) and groups == channels
            and wv.shape[1] == 1 and xv.shape[1] == channels)


def _channels_last_val(call: torch.fx.Node, replaced: torch.fx.Node) -> None:
    """call's fake value (the spec reads a graph output's): replaced's, channels-last as the kernels return it."""
    val = replaced.meta.get("val")
    if isinstance(val, torch.Tensor):
        call.meta["val"] = val.contiguous(memory_format=torch.channels_last)


def float_cpu(*nodes) -> bool:
    return all(n is None or (isinstance(n, torch.fx.Node) and isinstance(n.meta.get("val"), torch.Tensor)
                             and n.meta["val"].dtype == torch.float32 and n.meta["val"].device.type == "cpu")
               for n in nodes)


def _pointwise(node: torch.fx.Node) -> bool:
    args = _conv_args(node)
    if args is None:
        return False
    x, w, b, stride, padding, _dilation, groups = args
    if x is None or w is None or not float_cpu(x, w, b):
        return False
    xv, wv = x.meta["val"], w.meta["val"]
    return (xv.dim() == 4 and wv.dim() == 4 and groups == 1 and _pair(stride) == [1, 1] and _pair(padding) == [0, 0]
            and all(isinstance(d, int) for d in wv.shape) and tuple(wv.shape[2:]) == (1, 1)
            and xv.shape[1] == wv.shape[1] and wv.shape[0] > 0)


def _winograd(node: torch.fx.Node) -> bool:
    args = _conv_args(node)
    if args is None:
        return False
    x, w, b, stride, padding, dilation, groups = args
    if x is None or w is None or not float_cpu(x, w, b) or not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    xv, wv, yv = x.meta["val"], w.meta["val"], node.meta["val"]
    if xv.dim() != 4 or wv.dim() != 4 or groups != 1 or _pair(stride) != [1, 1] or _pair(dilation) != [1, 1]:
        return False
    pad = _pair(padding)
    if pad is None or min(pad) < 0 or not all(isinstance(d, int) for d in wv.shape) or tuple(wv.shape[2:]) != (3, 3):
        return False
    cout, cin = wv.shape[:2]
    return (xv.shape[1] == cin and min(cin, cout) >= WINOGRAD_MIN_CHANNELS and cin * cout <= WINOGRAD_MAX_PRODUCT
            and example_numel(yv.shape[2:]) >= WINOGRAD_MIN_OUTPUTS)


# activations the pointwise kernel applies: target -> its name there (hardtanh: only as ReLU6, checked below)
ACTIVATIONS = {aten.relu.default: "relu", aten.relu_.default: "relu", aten.hardswish.default: "hardswish",
                aten.hardswish_.default: "hardswish", aten.hardsigmoid.default: "hardsigmoid",
                aten.hardsigmoid_.default: "hardsigmoid", aten.hardtanh.default: "relu6",
                aten.hardtanh_.default: "relu6", aten.silu.default: "silu", aten.silu_.default: "silu",
                aten.sigmoid.default: "sigmoid", aten.sigmoid_.default: "sigmoid"}


def only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 and users[0].op == "call_function" else None


def _eval_batch_norm(node: torch.fx.Node | None, channels: int) -> bool:
    """node is aten.batch_norm in eval mode over `channels` with its statistics given (constants of the model)."""
    if node is None or node.target is not aten.batch_norm.default or len(node.args) < 8:
        return False
    _x, gamma, beta, mean, var, training, _momentum, eps = node.args[:8]
    return (training is False and isinstance(eps, float) and float_cpu(gamma, beta, mean, var)
            and all(isinstance(t, torch.fx.Node) and tuple(t.meta["val"].shape) == (channels,) for t in (mean, var))
            and all(t is None or tuple(t.meta["val"].shape) == (channels,) for t in (gamma, beta)))


def _pointwise_chain(conv: torch.fx.Node) -> tuple[torch.fx.Node | None, torch.fx.Node | None, str]:
    """The batch norm and the activation that follow `conv` alone (each None where there is none), and the
    activation's name for the kernel."""
    channels = conv.meta["val"].shape[1]
    bn = only_user(conv)
    bn = bn if _eval_batch_norm(bn, channels) else None
    act = only_user(bn if bn is not None else conv)
    if act is None or act.target not in ACTIVATIONS or act.args[0] is not (bn if bn is not None else conv):
        return bn, None, "none"
    if act.target in (aten.hardtanh.default, aten.hardtanh_.default) and tuple(act.args[1:3]) != (0.0, 6.0):
        return bn, None, "none"
    return bn, act, ACTIVATIONS[act.target]


def _fold_batch_norm(graph: torch.fx.Graph, bn: torch.fx.Node, weight: torch.fx.Node, b: torch.fx.Node | None,
                     scale_shape: list[int]) -> tuple[torch.fx.Node, torch.fx.Node]:
    """y = (conv - mean) / sqrt(var + eps) * gamma + beta folded into the convolution (as inductor's freezing folds
    it into ATen's): weight * s (s viewed as scale_shape, along the output channels), (b - mean) * s + beta."""
    call_fn = graph.call_function
    _y, gamma, beta, mean, var, _training, _momentum, eps = bn.args[:8]
    scale = call_fn(aten.rsqrt.default, (call_fn(aten.add.Tensor, (var, eps)),))
    if gamma is not None:
        scale = call_fn(aten.mul.Tensor, (scale, gamma))
    weight = call_fn(aten.mul.Tensor, (weight, call_fn(aten.view.default, (scale, scale_shape))))
    shifted = call_fn(aten.sub.Tensor, (b, mean)) if b is not None else call_fn(aten.neg.default, (mean,))
    b = call_fn(aten.mul.Tensor, (shifted, scale))
    if beta is not None:
        b = call_fn(aten.add.Tensor, (b, beta))
    return weight, b


def _replace_chain(graph: torch.fx.Graph, call: torch.fx.Node, conv: torch.fx.Node, bn: torch.fx.Node | None,
                   act: torch.fx.Node | None) -> None:
    """call takes the place of conv and the batch norm and activation it absorbed."""
    last = act if act is not None else bn if bn is not None else conv
    call.meta.update({k: v for k, v in conv.meta.items() if k in ("stack_trace", "nn_module_stack")})
    _channels_last_val(call, last)
    last.replace_all_uses_with(call)
    for node in (act, bn, conv):
        if node is not None:
            graph.erase_node(node)


def _rewrite_pointwise(graph: torch.fx.Graph, conv: torch.fx.Node) -> None:
    x, w, b, *_ = _conv_args(conv)
    bn, act, name = _pointwise_chain(conv)
    cout, cin = w.meta["val"].shape[:2]
    ldw = -(-cout // COLUMN_ALIGN) * COLUMN_ALIGN
    call_fn = graph.call_function
    last = act if act is not None else bn if bn is not None else conv
    with graph.inserting_before(last):
        weight = call_fn(aten.view.default, (w, [cout, cin]))
        if bn is not None:
            weight, b = _fold_batch_norm(graph, bn, weight, b, [cout, 1])
        weight = call_fn(aten.permute.default, (weight, [1, 0]))
        if ldw != cout:
            weight = call_fn(aten.constant_pad_nd.default, (weight, [0, ldw - cout], 0.0))
        weight = call_fn(aten.clone.default, (weight,), {"memory_format": torch.contiguous_format})
        call = call_fn(torch.ops.pt2rt.pointwise_conv2d.default, (x, weight, b, cout, name))
    _replace_chain(graph, call, conv, bn, act)


def _winograd_rows(graph: torch.fx.Graph, w: torch.fx.Node, dim: int) -> torch.fx.Node:
    """G g along dim (3 taps -> 4), G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]."""
    call_fn = graph.call_function
    g0, g1, g2 = (call_fn(aten.select.int, (w, dim, i)) for i in range(3))
    outer = call_fn(aten.add.Tensor, (g0, g2))
    rows = [g0, call_fn(aten.mul.Tensor, (call_fn(aten.add.Tensor, (outer, g1)), 0.5)),
            call_fn(aten.mul.Tensor, (call_fn(aten.sub.Tensor, (outer, g1)), 0.5)), g2]
    return call_fn(aten.stack.default, (rows, dim))


def _rewrite_winograd(graph: torch.fx.Graph, conv: torch.fx.Node) -> None:
    """conv and the batch norm and activation that follow it alone as one pt2rt::winograd_conv2d: its weight as
    G g G^T of each channel pair's taps ([16, C_in, C_out] padded to whole vectors), and the taps [3, 3, C_in, C_out]."""
    x, w, b, _stride, padding, *_ = _conv_args(conv)
    bn, act, name = _pointwise_chain(conv)
    cout, cin = w.meta["val"].shape[:2]
    ldw = -(-cout // COLUMN_ALIGN) * COLUMN_ALIGN
    call_fn = graph.call_function
    last = act if act is not None else bn if bn is not None else conv
    with graph.inserting_before(last):
        weight = w
        if bn is not None:
            weight, b = _fold_batch_norm(graph, bn, weight, b, [cout, 1, 1, 1])
        wide = call_fn(aten._to_copy.default, (weight,), {"dtype": torch.float64})
        wide = _winograd_rows(graph, _winograd_rows(graph, wide, 2), 3)  # [C_out, C_in, 4, 4]
        wide = call_fn(aten.permute.default, (wide, [2, 3, 1, 0]))
        wide = call_fn(aten._to_copy.default, (wide,), {"dtype": torch.float32})
        transformed = call_fn(aten.reshape.default, (wide, [16, cin, cout]))
        taps = call_fn(aten.permute.default, (weight, [2, 3, 1, 0]))
        if ldw != cout:
            transformed = call_fn(aten.constant_pad_nd.default, (transformed, [0, ldw - cout], 0.0))
            taps = call_fn(aten.constant_pad_nd.default, (taps, [0, ldw - cout], 0.0))
        transformed = call_fn(aten.clone.default, (transformed,), {"memory_format": torch.contiguous_format})
        taps = call_fn(aten.clone.default, (taps,), {"memory_format": torch.contiguous_format})
        call = call_fn(torch.ops.pt2rt.winograd_conv2d.default, (x, transformed, taps, b, cout, _pair(padding), name))
    _replace_chain(graph, call, conv, bn, act)


def _rewrite_depthwise(graph: torch.fx.Graph, conv: torch.fx.Node) -> None:
    """conv and the batch norm and activation that follow it alone as one call: pt2rt::depthwise_conv2d_act (the
    batch norm folded into the taps and the bias, the activation applied to each row the kernel finishes, while it
    is in L1), or pt2rt::depthwise_conv2d where no activation follows."""
    x, w, b, stride, padding, dilation, _groups = _conv_args(conv)
    bn, act, name = _pointwise_chain(conv)
    channels, _, kh, kw = w.meta["val"].shape
    call_fn = graph.call_function
    last = act if act is not None else bn if bn is not None else conv
    with graph.inserting_before(last):
        taps = call_fn(aten.view.default, (w, [channels, kh * kw]))
        if bn is not None:
            taps, b = _fold_batch_norm(graph, bn, taps, b, [channels, 1])
        taps = call_fn(aten.permute.default, (taps, [1, 0]))
        taps = call_fn(aten.clone.default, (taps,), {"memory_format": torch.contiguous_format})
        taps = call_fn(aten.view.default, (taps, [kh, kw, channels]))
        geometry = (_pair(stride), _pair(padding), _pair(dilation))
        if act is None:
            call = call_fn(torch.ops.pt2rt.depthwise_conv2d.default, (x, taps, b, *geometry))
        else:
            call = call_fn(torch.ops.pt2rt.depthwise_conv2d_act.default, (x, taps, b, *geometry, name))
    _replace_chain(graph, call, conv, bn, act)


def _winograd_extra_bytes(conv: torch.fx.Node) -> int:
    """The transformed weight, and the taps' padding to whole vectors."""
    cout, cin = _conv_args(conv)[1].meta["val"].shape[:2]
    ldw = -(-cout // COLUMN_ALIGN) * COLUMN_ALIGN
    return (16 * cin * ldw + 9 * cin * (ldw - cout)) * 4


def _within_budget(ep: torch.export.ExportedProgram, convs: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """The convolutions of `convs` whose transformed weights fit WINOGRAD_EXTRA_* (those with the most outputs per
    weight first), in graph order."""
    weights = sum(t.numel() * t.element_size() for t in (*ep.state_dict.values(), *ep.constants.values())
                  if isinstance(t, torch.Tensor))
    left = WINOGRAD_EXTRA_FRACTION * weights + WINOGRAD_EXTRA_BYTES
    chosen = set()
    for conv in sorted(convs, key=lambda n: _winograd_extra_bytes(n) / example_numel(n.meta["val"].shape[2:])):
        if _winograd_extra_bytes(conv) <= left:
            left -= _winograd_extra_bytes(conv)
            chosen.add(conv)
    return [n for n in convs if n in chosen]


def fuse(ep: torch.export.ExportedProgram, winograd: bool = True) -> torch.export.ExportedProgram:
    """Rewrites ep's depthwise, pointwise and (with `winograd`: where the weights are folded into constants, their
    transform computed once) 3x3 convolutions in place, as described above; returns ep."""
    calls = [n for n in ep.graph.nodes if _depthwise(n)]
    pointwise = [n for n in ep.graph.nodes if _pointwise(n)]
    winograd = _within_budget(ep, [n for n in ep.graph.nodes if _winograd(n)]) if winograd else []
    if not calls and not pointwise and not winograd:
        return ep
    if not recurrent.load_kernels() or not register():
        log.warning("%s not found: the model's %d depthwise, %d pointwise and %d 3x3 convolution(s) stay ATen's",
                    recurrent.LIBRARY_NAME, len(calls), len(pointwise), len(winograd))
        return ep
    log.info("%d depthwise, %d pointwise and %d 3x3 convolution(s) as pt2rt kernels: the package needs %s beside "
             "the runtime", len(calls), len(pointwise), len(winograd), recurrent.LIBRARY_NAME)
    graph = ep.graph
    for node in pointwise:
        _rewrite_pointwise(graph, node)
    for node in winograd:
        _rewrite_winograd(graph, node)
    for node in calls:
        _rewrite_depthwise(graph, node)
    graph.eliminate_dead_code()
    ep.graph_module.recompile()
    return ep


_registered = False


def register() -> bool:
    """The ops' outputs for tracing (channels-last, as the kernels return them) and inductor's layout of their inputs
    (channels-last: the kernels would copy anything else); once per process, after the library loaded. False where
    the loaded library lacks them (one older than this module)."""
    global _registered
    if _registered:
        return True
    try:
        for op in (OP, ACT_OP, POINTWISE_OP, WINOGRAD_OP):
            torch._C._get_schema(op, "")
    except RuntimeError:
        return False

    @torch.library.register_fake(OP)
    def _depthwise_conv2d(x, weight, bias, stride, padding, dilation):
        n, c, h, w = x.shape
        kh, kw = weight.shape[0], weight.shape[1]
        oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        return x.new_empty_strided((n, c, oh, ow), (oh * ow * c, 1, ow * c, c))

    from torch._inductor import ir, lowering

    def channels_last_input(_node, x, *args, **kwargs):
        return (ir.ExternKernel.require_channels_last(x), *args), kwargs

    # its lowering made here, with the constraint: inductor's implicit one would constrain the input to eager's
    # strides (NCHW), a copy before every call
    lowering.make_fallback(torch.ops.pt2rt.depthwise_conv2d.default, layout_constraint=channels_last_input, warn=False)

    @torch.library.register_fake(ACT_OP)
    def _depthwise_conv2d_act(x, weight, bias, stride, padding, dilation, activation):
        return _depthwise_conv2d(x, weight, bias, stride, padding, dilation)

    lowering.make_fallback(torch.ops.pt2rt.depthwise_conv2d_act.default, layout_constraint=channels_last_input,
                           warn=False)

    @torch.library.register_fake(POINTWISE_OP)
    def _pointwise_conv2d(x, weight, bias, out_channels, activation):
        n, _c, h, w = x.shape
        return x.new_empty_strided((n, out_channels, h, w), (h * w * out_channels, 1, w * out_channels, out_channels))

    lowering.make_fallback(torch.ops.pt2rt.pointwise_conv2d.default, layout_constraint=channels_last_input, warn=False)

    @torch.library.register_fake(WINOGRAD_OP)
    def _winograd_conv2d(x, weight, taps, bias, out_channels, padding, activation):
        n, _c, h, w = x.shape
        oh, ow = h + 2 * padding[0] - 2, w + 2 * padding[1] - 2
        return x.new_empty_strided((n, out_channels, oh, ow), (oh * ow * out_channels, 1, ow * out_channels,
                                                               out_channels))

    lowering.make_fallback(torch.ops.pt2rt.winograd_conv2d.default, layout_constraint=channels_last_input, warn=False)
    _registered = True
    return True
