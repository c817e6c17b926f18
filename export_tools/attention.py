"""Scaled dot-product attention as `pt2rt::attention` (libpt2rt_kernels.so): inductor leaves
`scaled_dot_product_attention` to ATen's flash attention for the CPU, whose small products per block of rows run
through MKL's sgemm with a copy of their operands each time (MKL's generic code on AMD); pt2rt's kernel packs each
head's k^T once and keeps its sums in registers (runtime/kernels/attention_impl.h; docs/export.md has the numbers).

`fuse(ep)` rewrites each call of a CPU float32 graph without a mask, dropout, causality or grouped heads; the others
stay ATen's. Without the kernels library the graph stays as it is, with a warning.
"""

from __future__ import annotations

import logging
import math

import torch

from . import recurrent

aten = torch.ops.aten
log = logging.getLogger("export_tools")

OP = "pt2rt::attention"
_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}


def _arguments(node: torch.fx.Node) -> dict | None:
    if node.op != "call_function" or node.target is not aten.scaled_dot_product_attention.default:
        return None
    args = dict(zip(("query", "key", "value", *_DEFAULTS), node.args))
    return {**_DEFAULTS, **args, **node.kwargs}


def _scale(args: dict) -> float | None:
    """The scale the call uses, None where it is not a number known at export (a feature count that varies)."""
    if args["scale"] is not None:
        return float(args["scale"]) if isinstance(args["scale"], (int, float)) else None
    d = args["query"].meta["val"].shape[-1]
    return 1.0 / math.sqrt(d) if isinstance(d, int) and d > 0 else None


def _fusable(node: torch.fx.Node) -> bool:
    args = _arguments(node)
    if args is None:
        return False
    if (args["attn_mask"] is not None or args["dropout_p"] != 0.0 or args["is_causal"] is not False
            or args["enable_gqa"] is not False):
        return False
    tensors = [args[k] for k in ("query", "key", "value")]
    if not all(isinstance(t, torch.fx.Node) and isinstance(t.meta.get("val"), torch.Tensor) for t in tensors):
        return False
    q, k, v = (t.meta["val"] for t in tensors)
    if not all(t.dtype == torch.float32 and t.device.type == "cpu" and t.dim() == 4 for t in (q, k, v)):
        return False
    # one head of k and v per head of q, at export's sizes (a dynamic dim: the same symbol)
    same = (q.shape[0] == k.shape[0] == v.shape[0] and q.shape[1] == k.shape[1] == v.shape[1]
            and k.shape[2] == v.shape[2] and q.shape[3] == k.shape[3])
    return bool(same) and _scale(args) is not None


def fuse(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Rewrites ep's attention calls (in place) as described above; returns ep."""
    calls = [n for n in ep.graph.nodes if _fusable(n)]
    if not calls:
        return ep
    if not recurrent.load_kernels() or not register():
        log.warning("%s not found: the model's %d attention call(s) stay ATen's", recurrent.LIBRARY_NAME, len(calls))
        return ep
    log.info("%d attention call(s) as pt2rt::attention: the package needs %s beside the runtime", len(calls),
             recurrent.LIBRARY_NAME)
    graph = ep.graph
    for node in calls:
        args = _arguments(node)
        with graph.inserting_before(node):
            call = graph.call_function(torch.ops.pt2rt.attention.default,
                                       (args["query"], args["key"], args["value"], _scale(args)))
        call.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            call.meta["val"] = val.transpose(1, 2).contiguous().transpose(1, 2)  # the kernel's layout
        node.replace_all_uses_with(call)
        graph.erase_node(node)
    ep.graph_module.recompile()
    return ep


def _attention(q, k, v, scale):
    # [B, L_q, H, D_v] in memory (the kernel's): the heads' transpose and view after it cost no copy
    return q.new_empty((q.shape[0], q.shape[2], q.shape[1], v.shape[3])).transpose(1, 2)


def register() -> bool:
    """The op's output for tracing (once per process, after the library loaded); False where the loaded library
    lacks the op."""
    return recurrent.register_fake(OP, _attention)
