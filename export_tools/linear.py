"""Linear layers as `pt2rt::linear` (libpt2rt_kernels.so): ATen's CPU linear layer is MKL's sgemm, which copies the
weight into its own packed form on every call (on AMD CPUs in its generic AVX2 code) and leaves the bias and what
follows to another pass. pt2rt's kernel reads a weight laid out once, at export, in panels of 16 columns
([ceil(out / 16), in, 16], zeros past the last column; runtime/kernels/pointwise.h's LinearRows) and applies the bias
and the activation that follows alone - ReLU, ReLU6, hardswish, hardsigmoid, SiLU, sigmoid or GELU (exact, eager's
erf) - to each tile in registers before it is stored. docs/export.md has the numbers.

`fuse(ep)` rewrites each `aten.linear` of a CPU float32 graph whose weight is a parameter or constant of the model
used by rewritten linear layers only (a weight also used elsewhere, e.g. tied to an embedding or by a layer that stays
ATen's, would be stored twice), whose input has a static feature count and either at most MAX_ROWS rows at the
example's sizes or at most ONE_BLOCK_FEATURES features. Where oneDNN packs a linear layer's weight in one of the
package's variants (the native or avx512 one on an AVX-512 export machine, a static row count: export_tools.passes)
that layer stays ATen's; a package of portable variants or lite alone (no oneDNN) has them all rewritten. Each output sums its products in
input order, the same at any thread count; outputs differ from MKL's by rounding only. Without the kernels library
the graph stays as it is, with a warning.
"""

from __future__ import annotations

import logging
import math

import torch

from . import convolutions, cpu, passes, recurrent

aten = torch.ops.aten
log = logging.getLogger("export_tools")

OP = "pt2rt::linear"
PANEL = 16  # runtime/kernels/pointwise.h's kLinearPanel
# Layers of more rows (at the example's sizes) and more features than the kernel takes in one block of the weight's
# rows (256 on AVX2) stay ATen's: there MKL's product, whose copy of the weight is then a small part of it, was as fast
# or faster (AMD EPYC Zen 3, one thread, per product: 1024 x 768 x 3072 and 1024 x 3072 x 768 1.04-1.08x MKL's time,
# 1576 x 768 x 192 1.01-1.03x), while in one block each output is stored once and the kernel kept up with MKL at any
# row count (1576 x 192 x 576 1.00x; ViT-Tiny at batch 8 with its 192-feature layers rewritten 0.98x / 0.98x on 1 / 2
# threads).
MAX_ROWS = 256
ONE_BLOCK_FEATURES = 256
# what follows alone, fused: convolutions' activations and exact GELU
_ACTIVATIONS = {**convolutions.ACTIVATIONS, aten.gelu.default: "gelu", aten.gelu_.default: "gelu"}


def _weight_constant(ep: torch.export.ExportedProgram, w: torch.fx.Node) -> bool:
    sig = ep.graph_signature
    return w.op == "placeholder" and (w.name in sig.inputs_to_parameters or w.name in sig.inputs_to_buffers
                                      or w.name in sig.inputs_to_lifted_tensor_constants)


def _args(node: torch.fx.Node) -> tuple | None:
    if node.op != "call_function" or node.target is not aten.linear.default:
        return None
    x, w, b = (*node.args, None)[:3]
    b = node.kwargs.get("bias", b)
    return x, w, b


def onednn_packs(variants: list[str] | None = None) -> bool:
    """Whether a CPU compile of `variants` (names; None: the native one) packs static-row linear layers for oneDNN's
    AVX-512 code (passes.packing_class): there oneDNN's packed product was 1.04-1.3x faster than the kernel's (AMD
    EPYC Zen 4, docs/export.md)."""
    return any(passes.packing_class_of(name) == "avx512" for name in (variants or [cpu.NATIVE]))


def _packed_by_onednn(x: torch.fx.Node, onednn: bool) -> bool:
    """oneDNN packs this layer's weight: a variant that packs for AVX-512 and a static row count."""
    return onednn and all(isinstance(d, int) for d in x.meta["val"].shape[:-1])


def _fusable(ep: torch.export.ExportedProgram, node: torch.fx.Node, onednn: bool) -> bool:
    args = _args(node)
    if args is None:
        return False
    x, w, b = args
    if not isinstance(x, torch.fx.Node) or not isinstance(w, torch.fx.Node) or not convolutions.float_cpu(x, w, b):
        return False
    xv, wv = x.meta["val"], w.meta["val"]
    # static sizes checked before comparing them (a comparison with a symbolic size would guard on it)
    if (wv.dim() != 2 or xv.dim() < 1 or not all(isinstance(d, int) for d in wv.shape) or wv.shape[0] == 0
            or not isinstance(xv.shape[-1], int) or xv.shape[-1] != wv.shape[1]):
        return False
    if b is not None and (b.meta["val"].dim() != 1 or b.meta["val"].shape[0] != wv.shape[0]):
        return False
    few_rows = convolutions.example_numel(xv.shape[:-1]) <= MAX_ROWS
    return (_weight_constant(ep, w) and (few_rows or xv.shape[-1] <= ONE_BLOCK_FEATURES)
            and not _packed_by_onednn(x, onednn))


def _rewritable(ep: torch.export.ExportedProgram, onednn: bool) -> list[torch.fx.Node]:
    """The fusable layers whose weight no other node uses (a layer that stays ATen's included)."""
    fusable = [n for n in ep.graph.nodes if _fusable(ep, n, onednn)]
    chosen = set(fusable)
    return [n for n in fusable if all(u in chosen and _args(u)[1] is _args(n)[1] for u in _args(n)[1].users)]


def _activation(node: torch.fx.Node) -> tuple[torch.fx.Node | None, str]:
    act = convolutions.only_user(node)
    if act is None or act.target not in _ACTIVATIONS or act.args[0] is not node:
        return None, "none"
    if act.target in (aten.hardtanh.default, aten.hardtanh_.default) and tuple(act.args[1:3]) != (0.0, 6.0):
        return None, "none"
    if act.target in (aten.gelu.default, aten.gelu_.default) and act.kwargs.get(
            "approximate", act.args[1] if len(act.args) > 1 else "none") != "none":
        return None, "none"
    return act, _ACTIVATIONS[act.target]


def _packed(graph: torch.fx.Graph, w: torch.fx.Node, first_use: torch.fx.Node) -> torch.fx.Node:
    """w [out, in] as panels [ceil(out / 16), in, 16] (folded into a constant by the compile's freezing), computed
    just before first_use (after every placeholder)."""
    out, k = w.meta["val"].shape
    panels = math.ceil(out / PANEL)
    call_fn = graph.call_function
    with graph.inserting_before(first_use):
        padded = call_fn(aten.constant_pad_nd.default, (w, [0, 0, 0, panels * PANEL - out], 0.0))
        with graph.inserting_after(padded):
            view = call_fn(aten.view.default, (padded, [panels, PANEL, k]))
        with graph.inserting_after(view):
            permuted = call_fn(aten.permute.default, (view, [0, 2, 1]))
        with graph.inserting_after(permuted):
            packed = call_fn(aten.clone.default, (permuted,), {"memory_format": torch.contiguous_format})
    return packed


def fuse(ep: torch.export.ExportedProgram, variants: list[str] | None = None) -> torch.export.ExportedProgram:
    """Rewrites ep's linear layers (in place) as described above for a package of the CPU variants `variants`
    (None: the native one); returns ep."""
    calls = _rewritable(ep, onednn_packs(variants))
    if not calls:
        return ep
    if not recurrent.load_kernels() or not register():
        log.warning("%s not found: the model's %d linear layer(s) stay ATen's", recurrent.LIBRARY_NAME, len(calls))
        return ep
    log.info("%d linear layer(s) as pt2rt::linear: the package needs %s beside the runtime", len(calls),
             recurrent.LIBRARY_NAME)
    graph = ep.graph
    weights: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in calls:
        x, w, b = _args(node)
        if w not in weights:
            weights[w] = _packed(graph, w, node)
        act, name = _activation(node)
        last = act if act is not None else node
        with graph.inserting_before(last):
            call = graph.call_function(torch.ops.pt2rt.linear.default,
                                       (x, weights[w], b, w.meta["val"].shape[0], name))
        call.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
        val = last.meta.get("val")
        if isinstance(val, torch.Tensor):
            call.meta["val"] = val.contiguous()
        last.replace_all_uses_with(call)
        for n in (act, node):
            if n is not None:
                graph.erase_node(n)
    graph.eliminate_dead_code()
    ep.graph_module.recompile()
    return ep


def _linear(x, weight, bias, out_features, activation):
    return x.new_empty((*x.shape[:-1], out_features))


def register() -> bool:
    """The op's output for tracing (once per process, after the library loaded); False where the loaded library
    lacks the op."""
    return recurrent.register_fake(OP, _linear)
