"""GRU, plain RNN and LSTM layers as one kernel call per layer, not a product per step.

inductor decomposes `aten.gru` and `aten.rnn_tanh` / `aten.rnn_relu` into their steps: a 2-layer bidirectional GRU
over 64 steps became 256 products by the recurrent weights, each a library call (7-10x slower than ONNX Runtime), and
each packed its own copy of its weight (217 MB for 19 MB of weights); `aten.lstm` becomes oneDNN's RNN primitive per
layer and direction. `fuse(ep)` rewrites each such call of a CPU float32 graph in inference (an LSTM without
projections) into, per layer, the input gates of every step as one linear layer (both directions' weights stacked:
one product, which inductor compiles and packs like any linear layer) and `pt2rt::rnn_layer` / `pt2rt::lstm_layer`
for the recurrence, its W_hh packed in panels (pack_whh) at export (runtime/kernels: libpt2rt_kernels.so, which the
package then names as the library it needs; the runtime finds it next to libpt2rt.so). docs/export.md has the
numbers.

The kernels library is looked for in $PT2RT_KERNELS_LIBRARY, then this checkout's build tree, then
<sys.prefix>/lib; without it the layers stay as inductor makes them (each weight still packed once:
passes._one_pack_per_weight), with a warning.
"""

from __future__ import annotations

import logging
import operator
from pathlib import Path

import torch

from . import libraries

aten = torch.ops.aten
log = logging.getLogger("export_tools")

LIBRARY_NAME = "libpt2rt_kernels.so"
ENV_VAR = "PT2RT_KERNELS_LIBRARY"
_MODES = {aten.gru.input: "gru", aten.rnn_tanh.input: "rnn_tanh", aten.rnn_relu.input: "rnn_relu",
          aten.lstm.input: "lstm"}


def library_candidates() -> list[Path]:
    """Where libpt2rt_kernels.so is looked for after $PT2RT_KERNELS_LIBRARY, in order."""
    return libraries.built_candidates(LIBRARY_NAME)


def find_library() -> Path | None:
    return libraries.find_built(LIBRARY_NAME, ENV_VAR)


def load_for(spec: dict) -> None:
    """Loads libpt2rt_kernels.so where a package's spec names it and it is not loaded yet (Python's loader and
    verifier, as the runtime finds it next to libpt2rt.so)."""
    if any(op["library"] == LIBRARY_NAME for op in spec.get("custom_ops", ())):
        _load(find_library())


def _load(path: Path | None) -> bool:
    """The kernels registered (once: a second file registering the namespace would abort the process), with their
    shapes for tracing; False without a library."""
    if not _registered():
        if path is None:
            return False
        libraries.load_ops_library(path)
    _register_fakes()
    return True


def load_kernels() -> bool:
    """libpt2rt_kernels.so loaded (where it is not yet) with its ops' shapes for tracing; False without it."""
    return _load(None if _registered() else find_library())


def _registered() -> bool:
    try:
        torch._C._get_schema("pt2rt::rnn_layer", "")
        return True
    except RuntimeError:
        return False


_fakes: set[str] = set()


def register_fake(op: str, fn) -> bool:
    """fn as op's output for tracing, once per process, after the library loaded; False where the loaded library
    lacks op (one older than export_tools)."""
    if op in _fakes:
        return True
    try:
        torch._C._get_schema(op, "")
    except RuntimeError:
        return False
    torch.library.register_fake(op)(fn)
    _fakes.add(op)
    return True


_fakes_registered = False


def _register_fakes() -> None:
    """The ops' output shapes from their inputs' (symbolic batch and steps included), for torch.export and inductor."""
    global _fakes_registered
    if _fakes_registered:
        return

    def outputs(gi, h0, batch_first):
        d, b, h = h0.shape
        t = gi.shape[1] if batch_first else gi.shape[0]
        return gi.new_empty((b, t, d * h) if batch_first else (t, b, d * h)), h0.new_empty((d, b, h))

    @torch.library.register_fake("pt2rt::rnn_layer")
    def _rnn_layer(gi, h0, whh, bhh, mode, batch_first):
        return outputs(gi, h0, batch_first)

    @torch.library.register_fake("pt2rt::lstm_layer")
    def _lstm_layer(gi, h0, c0, whh, bhh, batch_first):
        return (*outputs(gi, h0, batch_first), c0.new_empty(c0.shape))

    _fakes_registered = True


PANEL = 128  # runtime/kernels/rnn_kernel.h kPanel: gates per panel of the packed W_hh


def pack_whh(w_hh: torch.Tensor) -> torch.Tensor:
    """W_hh [G, H] as pt2rt's kernels read it: transposed and cut in panels of PANEL gates, zeros past G
    ([G_p / PANEL, H, PANEL]); each panel is read start to end every step."""
    g, h = w_hh.shape
    padded = -(-g // PANEL) * PANEL
    return torch.nn.functional.pad(w_hh.t(), (0, padded - g)).view(h, padded // PANEL, PANEL).permute(1, 0, 2) \
        .contiguous()


def pad_bhh(b_hh: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.pad(b_hh, (0, -(-b_hh.shape[0] // PANEL) * PANEL - b_hh.shape[0]))


def _rnn_calls(ep: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    return [n for n in ep.graph.nodes if n.op == "call_function" and n.target in _MODES]


def _fusable(node: torch.fx.Node) -> bool:
    x, hx, params, _has_biases, _layers, _dropout, train = node.args[:7]
    states = hx if isinstance(hx, (list, tuple)) else [hx]
    vals = [a.meta.get("val") for a in (x, *states, *params)]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    # an LSTM with projections (proj_size: h narrower than c) stays torch's
    projected = len(states) == 2 and vals[1].shape[-1] != vals[2].shape[-1]
    return not train and not projected and all(v.dtype == torch.float32 and v.device.type == "cpu" for v in vals)


def fuse(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Rewrites ep's GRU, RNN and LSTM calls (in place) as described above; returns ep."""
    calls = [n for n in _rnn_calls(ep) if _fusable(n)]
    if not calls:
        return ep
    if not load_kernels():
        log.warning("%s not found (%s, %s): the model's recurrent layers are left as inductor makes them, a "
                    "product per step - build the runtime (make build) or set %s", LIBRARY_NAME, ENV_VAR,
                    ", ".join(str(p) for p in library_candidates()), ENV_VAR)
        return ep
    log.info("%d recurrent layer call(s) as pt2rt kernels: the package needs %s beside the runtime", len(calls),
             LIBRARY_NAME)
    graph = ep.graph
    for node in calls:
        _replace(graph, node)
    graph.eliminate_dead_code()
    ep.graph_module.recompile()
    return ep


def _replace(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    x, hx, params, has_biases, num_layers, _dropout, _train, bidirectional, batch_first = node.args
    mode = _MODES[node.target]
    lstm = mode == "lstm"
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    with graph.inserting_before(node):
        states = {0: [], 1: []}  # each layer's last h (and an LSTM's c)
        for layer in range(num_layers):
            ws = [params[(layer * directions + d) * per:(layer * directions + d + 1) * per] for d in range(directions)]
            w_ih = [w[0] for w in ws]
            stacked = w_ih[0] if directions == 1 else graph.call_function(aten.cat.default, (w_ih, 0))
            if has_biases:
                b_ih = [w[2] for w in ws]
                bias = b_ih[0] if directions == 1 else graph.call_function(aten.cat.default, (b_ih, 0))
                gi = graph.call_function(aten.linear.default, (x, stacked, bias))
            else:
                gi = graph.call_function(aten.linear.default, (x, stacked))
            # W_hh and b_hh as the kernel reads them (pack_whh, pad_bhh): constants once folded
            gates, hidden = ws[0][1].meta["val"].shape
            padded = -(-gates // PANEL) * PANEL
            whh_t = []
            for w in ws:
                t = graph.call_function(aten.t.default, (w[1],))
                t = graph.call_function(aten.constant_pad_nd.default, (t, [0, padded - gates]))
                t = graph.call_function(aten.view.default, (t, [hidden, padded // PANEL, PANEL]))
                t = graph.call_function(aten.permute.default, (t, [1, 0, 2]))
                whh_t.append(graph.call_function(aten.clone.default, (t,), {"memory_format": torch.contiguous_format}))
            if has_biases:
                bhh = [graph.call_function(aten.constant_pad_nd.default, (w[3], [0, padded - gates])) for w in ws]
            else:
                bhh = [graph.call_function(aten.new_zeros.default, (w[1], [padded])) for w in ws]
            span = (0, layer * directions, (layer + 1) * directions)
            if lstm:
                h0 = graph.call_function(aten.slice.Tensor, (hx[0], *span))
                c0 = graph.call_function(aten.slice.Tensor, (hx[1], *span))
                call = graph.call_function(torch.ops.pt2rt.lstm_layer.default, (gi, h0, c0, whh_t, bhh, batch_first))
            else:
                h0 = graph.call_function(aten.slice.Tensor, (hx, *span))
                call = graph.call_function(torch.ops.pt2rt.rnn_layer.default, (gi, h0, whh_t, bhh, mode, batch_first))
            x = graph.call_function(operator.getitem, (call, 0))
            for k in states:
                if k == 0 or lstm:
                    states[k].append(graph.call_function(operator.getitem, (call, k + 1)))
        last = {k: v[0] if num_layers == 1 else graph.call_function(aten.cat.default, (v, 0))
                for k, v in states.items() if v}
    for user in list(node.users):
        if user.op == "call_function" and user.target is operator.getitem:
            replacement = x if user.args[1] == 0 else last[user.args[1] - 1]
            replacement.meta.update({k: v for k, v in user.meta.items() if k == "val"})
            user.replace_all_uses_with(replacement)
            graph.erase_node(user)
    graph.erase_node(node)
