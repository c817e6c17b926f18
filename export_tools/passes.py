"""What export_tools adds to inductor's compile of a CPU package (docs/performance.md, "Against ONNX Runtime and
OpenVINO"): matrix products rewritten where ATen's form of them is slow. `ProductRewrites` runs after freezing (which
folds batch norms into the convolutions' biases) and rewrites
- `bmm(x, w)` with `w` one matrix for every batch entry (stride 0) as one `mm` of x's rows (copied into one matrix)
  by `w[0]`, viewed back. A linear layer on a 3-D input whose rows are not one matrix in memory becomes that bmm - a
  batch-first `nn.MultiheadAttention` transposes its input to (L, N, E) - so BERT-base at batch 8 ran 128 products
  of 8 rows, 2x slower than eager: 1897 -> 946 ms on one thread; ViT-Tiny at batch 8 -14 %;
- `addmm(b, x, w)` as `mm(x, w) + b`: ATen's addmm (a linear layer with a bias) first copies the bias broadcast over
  the whole output, a strided copy (0.27 ms for a 56 x 56 x 72 output in MobileNetV3-Small), then multiplies;
- a pointwise convolution (1x1, stride 1, no padding, ungrouped) `conv(x, w, b)` as `conv(x, w) + b`, which
  inductor's `conv_1x1_as_mm` then lowers to a plain `mm` (on the channels-last layout it gives convolutions);
so the adds fuse into the kernel of whatever follows (an activation, a residual add, a layer norm). The same
operations as eager up to float rounding, NaN and inf included. Measured (pt2run, batch 1, 1 / 2 threads,
2026-12-03, Intel Xeon with AMX, 2 vCPUs): MobileNetV3-Small -9 % / -25 %, ViT-Tiny -4 % / -5 %, BERT-base -1 % /
-2 %, ResNet-18 (no 1x1 stride-1 convolutions) unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

aten = torch.ops.aten


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


class ProductRewrites(CustomGraphPass):
    """bmm(x, w shared) -> mm(rows of x, w[0]).view(...); addmm(b, x, w) -> mm(x, w) + b;
    pointwise conv(x, w, b) -> conv(x, w) + b.view(1, K, 1, ...)."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            if node.op != "call_function":
                continue
            if node.target is aten.bmm.default and _shared_rhs_bmm(node):
                x, w = node.args
                # -1 for the rows: their count may be dynamic (no SymInt in the graph's arguments)
                batch, inner, cols = x.meta["val"].shape[0], x.meta["val"].shape[2], w.meta["val"].shape[2]
                with graph.inserting_before(node):
                    dense = graph.call_function(aten.clone.default, (x,), {"memory_format": torch.contiguous_format})
                    dense.meta["val"] = x.meta["val"].clone(memory_format=torch.contiguous_format)
                    flat = _with_val(graph.call_function(aten.view.default, (dense, [-1, inner])))
                    matrix = _with_val(graph.call_function(aten.select.int, (w, 0, 0)))
                    product = _with_val(graph.call_function(aten.mm.default, (flat, matrix)))
                    out = _with_val(graph.call_function(aten.view.default, (product, [batch, -1, cols])))
                node.replace_all_uses_with(out)
                graph.erase_node(node)
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


def cpu_inductor_config() -> dict[str, Any]:
    """The inductor settings export_tools compiles CPU packages with, on top of freezing."""
    return {"conv_1x1_as_mm": True, "post_grad_custom_post_pass": ProductRewrites()}
