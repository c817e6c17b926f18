"""What export_tools adds to inductor's compile of a CPU package; why each piece is there and what it gained, measured
against the peers, is in docs/export.md and docs/performance.md.

`ProductRewrites` runs after freezing (which folds batch norms into the convolutions' biases) and rewrites matrix
products where ATen's form of them is slow:
- `bmm(x, w)` with `w` one matrix for every batch entry (stride 0) as one `mm` of x's rows (copied into one matrix)
  by `w[0]`, viewed back: what a linear layer makes of a 3-D input whose rows are not one matrix in memory (a
  batch-first `nn.MultiheadAttention` transposes its input to (L, N, E));
- `addmm(b, x, w)` as `mm(x, w) + b`: ATen's addmm first copies the bias broadcast over the whole output;
- a pointwise convolution (1x1, stride 1, no padding, ungrouped) that export_tools.convolutions left to ATen
  `conv(x, w, b)` as `conv(x, w) + b`, which inductor's `conv_1x1_as_mm` then lowers to a plain `mm`;
so the adds fuse into the kernel of whatever follows (an activation, a residual add, a layer norm). The same
operations as eager up to float rounding, NaN and inf included.

`weight_packing(variant)`: oneDNN's packed weights (inductor's `cpp.weight_prepack`) for the depthwise convolutions
that export_tools.convolutions leaves to ATen (all of them where the kernels library is missing) and the small dense
ones (a kernel larger than 1x1; ungrouped with at most PACK_MAX_POSITIONS output positions) in the native variant,
and on an AVX-512 machine also for the linear layers with a static row count and the LSTM layers, in the avx512
variant too. oneDNN lays the weights out for the CPU class it runs on (`onednn_class`) and falls back
to a reference kernel where the class at run time differs, so the spec records the class a variant was packed for
(`packed_for`) and the runtimes pass over a variant packed for another class; the portable avx2 and default variants
stay unpacked. On an AVX2 machine oneDNN's packed linear layers lost to MKL's products, so only the convolutions are
packed there. 1x1 convolutions are products instead (above). `SharedWeightProducts` makes the bmm rewrite above
before freezing, so those products are packed too. `KeepNonFinite` keeps the activations inductor would fuse into
the packed calls out of them where oneDNN's form differs from eager's on NaN (ReLU, clamps, hardsigmoid: NaN -> 0).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

aten = torch.ops.aten
log = logging.getLogger("export_tools")


def _with_val(node: torch.fx.Node) -> torch.fx.Node:
    # the fake value lowering reads (shapes, strides), from the fake values of the node's inputs
    node.meta["val"] = node.target(*torch.fx.node.map_arg(node.args, lambda n: n.meta["val"]))
    return node


def _has_val(*nodes: Any) -> bool:
    return all(isinstance(n, torch.fx.Node) and "val" in n.meta for n in nodes)


def _pointwise_conv(node: torch.fx.Node) -> bool:
    x, w, bias, stride, padding, dilation, transposed, _output_padding, groups = node.args
    return (_has_val(node, x, w, bias) and not transposed and groups == 1 and all(s == 1 for s in stride)
            and all(p == 0 for p in padding) and all(d == 1 for d in dilation)
            and all(k == 1 for k in w.meta["val"].shape[2:]))


def _shared_rhs_bmm(node: torch.fx.Node) -> bool:
    # one matrix for the whole batch; the batch and the matrix of static sizes (no guard on a dynamic dim, no SymInt
    # in the new nodes' arguments), the rows of any
    if not _has_val(node, *node.args):
        return False
    x, w = node.args[0].meta["val"], node.args[1].meta["val"]
    static = all(isinstance(d, int) for d in (x.shape[0], x.shape[2], *w.shape, w.stride(0)))
    return static and x.shape[0] > 1 and w.stride(0) == 0


def _plain_addmm(node: torch.fx.Node) -> bool:
    return (_has_val(node, *node.args) and node.kwargs.get("beta", 1) == 1 and node.kwargs.get("alpha", 1) == 1
            and node.args[0].meta["val"].dim() <= 2)


def _matrix_expanded(w: torch.fx.Node) -> torch.fx.Node | None:
    """The 2-D matrix `w` expands over the batch (view(expand(m, [B, K, N]))), as a linear layer's decomposition
    makes of its weight; None if `w` is not that."""
    if w.target is aten.view.default:
        w = w.args[0]
    if w.target is not aten.expand.default or not _has_val(w.args[0]):
        return None
    m = w.args[0]
    return m if m.meta["val"].dim() == 2 and tuple(m.meta["val"].shape) == tuple(w.meta["val"].shape[1:]) else None


def _one_product(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """bmm(x, w shared by the batch) -> mm(x's rows, w's matrix).view(...)."""
    x, w = node.args
    # -1 for the rows: their count may be dynamic (no SymInt in the graph's arguments)
    batch, inner, cols = x.meta["val"].shape[0], x.meta["val"].shape[2], w.meta["val"].shape[2]
    with graph.inserting_before(node):
        dense = graph.call_function(aten.clone.default, (x,), {"memory_format": torch.contiguous_format})
        dense.meta["val"] = x.meta["val"].clone(memory_format=torch.contiguous_format)
        flat = _with_val(graph.call_function(aten.view.default, (dense, [-1, inner])))
        matrix = _matrix_expanded(w) or _with_val(graph.call_function(aten.select.int, (w, 0, 0)))
        product = _with_val(graph.call_function(aten.mm.default, (flat, matrix)))
        out = _with_val(graph.call_function(aten.view.default, (product, [batch, -1, cols])))
    node.replace_all_uses_with(out)
    graph.erase_node(node)


class SharedWeightProducts(CustomGraphPass):
    """The bmm rewrite of ProductRewrites, before freezing (a joint-graph pass): the product then takes the linear
    layer's weight itself (mm(x, permute(w))), the form freezing packs for oneDNN (_packed_linear)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.find_nodes(op="call_function", target=aten.bmm.default):
            if _shared_rhs_bmm(node):
                _one_product(graph, node)
        graph.eliminate_dead_code()
        graph.lint()

    def uuid(self) -> Any:
        return get_hash_for_files((__file__,))


# The constants of the last CPU compile's graph after freezing, (shape, dtype name, bytes) each: the exporter's size
# check names what repeats from it (export._constants_problem).
last_constants: list[tuple[tuple[int, ...], str, int]] = []
def _census(graph: torch.fx.Graph) -> None:
    last_constants.clear()
    for node in graph.nodes:
        val = node.meta.get("val") if node.op == "get_attr" else None
        if isinstance(val, torch.Tensor):
            last_constants.append((tuple(int(d) for d in val.shape), str(val.dtype).removeprefix("torch."),
                                   val.numel() * val.element_size()))


class ProductRewrites(CustomGraphPass):
    """bmm(x, w shared) -> mm(rows of x, w[0]).view(...); addmm(b, x, w) -> mm(x, w) + b;
    pointwise conv(x, w, b) -> conv(x, w) + b.view(1, K, 1, ...). Takes the census of the frozen constants first."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        _census(graph)
        for node in list(graph.nodes):
            if node.op != "call_function":
                continue
            if node.target is aten.bmm.default and _shared_rhs_bmm(node):
                _one_product(graph, node)
            elif node.target is aten.addmm.default and _plain_addmm(node):
                bias, x, w = node.args
                with graph.inserting_before(node):
                    product = _with_val(graph.call_function(aten.mm.default, (x, w)))
                    add = graph.call_function(aten.add.Tensor, (product, bias))
                add.meta["val"] = node.meta["val"]
                node.replace_all_uses_with(add)
                graph.erase_node(node)
            elif node.target is aten.convolution.default and _pointwise_conv(node):
                bias = node.args[2]
                shape = [1, node.args[1].meta["val"].shape[0]] + [1] * (node.meta["val"].dim() - 2)
                with graph.inserting_after(node):
                    view = _with_val(graph.call_function(aten.view.default, (bias, shape)))
                with graph.inserting_after(view):
                    add = graph.call_function(aten.add.Tensor, (node, view))
                node.replace_all_uses_with(add, delete_user_cb=lambda user: user is not add)
                node.args = node.args[:2] + (None,) + node.args[3:]
                add.meta["val"] = node.meta["val"]
        graph.lint()

    def uuid(self) -> Any:
        return get_hash_for_files((__file__,))


class KeepNonFinite(CustomGraphPass):
    """Before inductor fuses activations into oneDNN's calls (post-grad patterns): relu(x) -> clamp_min(x, 0) and
    clamp_max(clamp_min(x, a), b) -> clamp_min(clamp_max(x, b), a), the same values with NaN kept (inductor's
    clamps propagate NaN, as eager's do) in forms the fusion patterns do not match."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.op != "call_function":
                continue
            if node.target is aten.relu.default:
                with graph.inserting_before(node):
                    clamp = graph.call_function(aten.clamp_min.default, (node.args[0], 0))
                clamp.meta.update(node.meta)
                node.replace_all_uses_with(clamp)
                graph.erase_node(node)
        for node in list(graph.nodes):
            if (node.op == "call_function" and node.target is aten.clamp_max.default
                    and isinstance(node.args[0], torch.fx.Node) and node.args[0].target is aten.clamp_min.default
                    and len(node.args[0].users) == 1):
                low, high = node.args[0], node.args[1]
                with graph.inserting_before(node):
                    upper = graph.call_function(aten.clamp_max.default, (low.args[0], high))
                    swapped = graph.call_function(aten.clamp_min.default, (upper, low.args[1]))
                upper.meta.update(low.meta)
                swapped.meta.update(node.meta)
                node.replace_all_uses_with(swapped)
                graph.erase_node(node)
                graph.erase_node(low)
        graph.lint()

    def uuid(self) -> Any:
        return get_hash_for_files((__file__,))


# output positions (batch x height x width) up to which packing a dense convolution wins: oneDNN's per-call reorder
# of unpacked weights costs as much as a sizeable part of the product there; past it the activation's own pass (no
# longer fused, KeepNonFinite) costs more than packing saves (ResNet-18: batch 1 -12 %, batch 8 all packed +10 %)
PACK_MAX_POSITIONS = 256


def _packed_conv(match: Any) -> bool:
    """Depthwise convolutions (MobileNetV3-Small -7 % / -11 % at batch 1, -2 % at batch 8) and dense ones with few
    output positions; static shapes only (a dynamic size: inductor would pack at every call)."""
    conv = match.output_node()
    _x, w, _b, _stride, _padding, _dilation, transposed, _output_padding, groups = conv.args
    shape, out = w.meta["val"].shape, conv.meta["val"].shape
    if transposed or len(shape) != 4 or all(k == 1 for k in shape[2:]) or not all(isinstance(d, int) for d in out):
        return False
    depthwise = groups > 1 and shape[1] == 1
    return depthwise or (groups == 1 and out[0] * out[2] * out[3] <= PACK_MAX_POSITIONS)


def _packed_linear(match: Any) -> bool:
    """Linear layers (products by a constant weight) with a static row count: oneDNN's packed product, where ATen's
    goes to MKL, which copies the weight into its packed form on every call and, on AMD CPUs, runs its AVX2 code
    (BERT-base at batch 1 -18 %, ViT-Tiny -26 %, on an AMD EPYC; -4 % / +5 % on an Intel Xeon). oneDNN packs for
    the row count it is given: a dynamic one would be packed for its hint."""
    linear = match.output_node()
    rows = linear.args[1 if linear.target is aten.addmm.default else 0].meta["val"].shape[0]
    return isinstance(rows, int)


# inductor's checks of what its freezing pass packs -> ours on top (given the CPU class), while `weight_packing` is on
_PACK_RULES = {"_is_packable_convolution": lambda match, cls: _packed_conv(match),
               # AVX2: oneDNN's packed products lost to MKL's (ViT-Tiny +16 %, BERT-base +44 % at one thread, on an
               # AMD EPYC without AVX-512)
               "_is_packable_linear": lambda match, cls: cls == "avx512" and _packed_linear(match),
               # LSTM layers: their packing does not depend on the input's shape (the LSTM at batch 1: -17 % / -9 %
               # on 1 / 2 threads on an AMD EPYC with AVX-512, batch 8 -1 %; within noise on an Intel Xeon and on AVX2)
               "_is_packable_mkldnn_rnn_layer": lambda match, cls: cls == "avx512"}
_packing_class: str | None = None


# layout operations the packing patterns apply to a weight before packing it (a linear layer's transpose)
_WEIGHT_VIEWS = (aten.permute.default, aten.t.default, aten.transpose.int, aten.view.default, aten.reshape.default,
                 aten.expand.default, aten.clone.default)


def _one_pack_per_weight(graph: torch.fx.Graph) -> int:
    """Merges the layout operations of one constant weight with the same arguments, so that inductor's duplicate
    packing elimination (which merges packings of one input node) packs each weight once. Its patterns make a
    transpose of the weight per product they pack: an unrolled recurrence (a GRU or RNN layer: a product per step by
    one weight) was packed once per step - a 217 MB package for 19 MB of weights. Returns how many were merged."""
    seen: dict[tuple, torch.fx.Node] = {}
    merged = 0
    for node in list(graph.nodes):
        if (node.op != "call_function" or node.target not in _WEIGHT_VIEWS or not node.args
                or not isinstance(node.args[0], torch.fx.Node) or node.args[0].op != "get_attr"):
            continue
        key = (node.target, repr(node.args), repr(sorted(node.kwargs.items())))
        if key in seen:
            node.replace_all_uses_with(seen[key])
            graph.erase_node(node)
            merged += 1
        else:
            seen[key] = node
    return merged


@functools.cache
def _restrict_packing() -> bool:
    """Our rules wrapped around inductor's checks, once per process (inductor registers its packing patterns once),
    and each weight packed once (_one_pack_per_weight ahead of inductor's elimination of duplicate packings); False
    where this torch's inductor lacks them (then nothing is packed)."""
    from torch._inductor import config
    from torch._inductor.fx_passes import freezing_patterns, mkldnn_fusion

    mkldnn_fusion._mkldnn_weight_pack_init()  # registers the packing patterns (functools.cache)
    eliminate = getattr(mkldnn_fusion, "_eliminate_duplicate_packed_nodes", None)
    if eliminate is None:
        return False

    def packed_once(gm, _eliminate=eliminate):
        _one_pack_per_weight(gm.graph)
        return _eliminate(gm)

    mkldnn_fusion._eliminate_duplicate_packed_nodes = packed_once  # freezing_passes imports it when it runs
    found = set()
    for patterns in freezing_patterns.pass_patterns:
        for entries in patterns.patterns.values():
            for entry in entries:
                name = getattr(entry.extra_check, "__name__", "")
                if name not in _PACK_RULES:
                    continue
                found.add(name)

                def restricted(match, _inductors=entry.extra_check, _ours=_PACK_RULES[name]):
                    # inductor applies its packing patterns, once registered, to every later freezing compile of
                    # the process, whatever its cpp.weight_prepack: gate them on it
                    return (config.cpp.weight_prepack and _inductors(match)
                            and (_packing_class is None or _ours(match, _packing_class)))

                entry.extra_check = restricted
    return found == set(_PACK_RULES)


_AVX512 = frozenset({"avx512f", "avx512bw", "avx512dq", "avx512vl"})


# oneDNN's names of the ISAs it may be capped at (ONEDNN_MAX_CPU_ISA, lower-cased, exactly; any other value caps
# nothing) below AVX-512, by the class of code they leave it
_CAPS_BELOW_AVX512 = {"sse41": None, "avx": None, "avx2": "avx2", "avx2_vnni": "avx2", "avx2_vnni_2": "avx2"}


def onednn_class(features: frozenset[str] | None = None) -> str | None:
    """The class of code oneDNN runs on a CPU with `features` (default: this machine's) - "avx512", "avx2" or None
    (neither) - which packed weights are laid out for; ONEDNN_MAX_CPU_ISA (else DNNL_MAX_CPU_ISA) caps it, as in
    oneDNN. runtime/src/cpu_features.cpp's onednn_cpu_class is the runtime's copy."""
    from . import cpu

    if cpu.host_arch() != "x86_64":
        return None
    features = cpu.host_features() if features is None else features
    cls = "avx512" if _AVX512 <= features else "avx2" if {"avx2", "fma"} <= features else None
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").lower()
    if cap not in _CAPS_BELOW_AVX512:
        return cls
    return _CAPS_BELOW_AVX512[cap] if cls else None


def packing_class(variant: Any) -> str | None:
    """The oneDNN class `variant`'s CPU compile (None: none) packs weights for, or None where it packs none (the
    module's docstring): the native variant on an AVX2 or AVX-512 machine, the avx512 one on an AVX-512 machine."""
    if variant is None or variant.arch != "x86_64":
        return None
    return packing_class_of(variant.name)


def packing_class_of(name: str) -> str | None:
    """packing_class of the variant named `name` compiled on this machine, before it is compiled."""
    from . import cpu

    if ((cpu.arch_of(name) or cpu.host_arch()) != "x86_64" or not torch.backends.mkldnn.is_available()
            or any(os.environ.get(k) for k in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"))):
        return None
    cls = onednn_class()
    if name == cpu.NATIVE or (name == "avx512" and cls == "avx512"):
        return cls
    return None


# inductor's counts of the weights its freezing patterns packed (oneDNN's and, for quantized models, its int8 ones)
_PACK_COUNTERS = ("mkldnn_conv_weight_pack_matcher_count", "mkldnn_linear_weight_pack_matcher_count",
                  "mkldnn_rnn_weight_pack_matcher_count", "qconv_weight_prepack_matcher_count",
                  "qlinear_weight_prepack_matcher_count")


def packed_weights(reset: bool = False) -> int:
    """How many weights inductor packed since the last reset (reset: start counting anew, returns 0)."""
    from torch._dynamo.utils import counters

    if reset:
        for key in _PACK_COUNTERS:
            counters["inductor"].pop(key, None)
    return sum(counters["inductor"].get(key, 0) for key in _PACK_COUNTERS)


@contextlib.contextmanager
def weight_packing(variant: Any) -> Iterator[dict[str, Any]]:
    """The inductor settings of `variant`'s compile that concern packed weights, our packing rules on meanwhile."""
    global _packing_class
    cls = packing_class(variant)
    if cls is None:
        yield {"cpp.weight_prepack": False}
        return
    if not _restrict_packing():
        log.warning("this torch's inductor lacks the checks export_tools restricts weight packing with: "
                    "nothing packed")
        yield {"cpp.weight_prepack": False}
        return
    _packing_class = cls
    try:
        yield {"cpp.weight_prepack": True, "post_grad_custom_pre_pass": KeepNonFinite()}
    finally:
        _packing_class = None


def cpu_inductor_config() -> dict[str, Any]:
    """The inductor settings export_tools compiles CPU packages with, on top of freezing (and weight_packing's)."""
    return {"conv_1x1_as_mm": True, "joint_custom_pre_pass": SharedWeightProducts(),
            "post_grad_custom_post_pass": ProductRewrites()}
