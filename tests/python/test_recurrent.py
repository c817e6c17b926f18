"""GRU and plain RNN layers as one kernel call per layer (export_tools.recurrent, libpt2rt_kernels.so's
pt2rt::rnn_layer): the kernel against torch's modules, the graph rewrite against the eager model, without compiling
(test_export.py's recurrent test compiles one package; the C++ tests run another through the runtime)."""

import logging
import re
from pathlib import Path

import pytest
import torch

from export_tools import OpsLibraryError, libraries, recurrent

CONFIGS = [  # kind, input, hidden, layers, bidirectional, batch_first, batch, steps, bias
    ("gru", 5, 6, 1, False, False, 2, 7, True),
    ("gru", 80, 256, 2, True, True, 1, 64, True),
    ("gru", 17, 20, 3, True, False, 3, 5, False),
    ("rnn_tanh", 8, 33, 2, False, True, 4, 9, True),
    ("rnn_tanh", 12, 64, 2, True, False, 2, 11, True),
    ("rnn_relu", 7, 17, 2, True, True, 3, 6, False),
    ("lstm", 10, 32, 2, True, True, 2, 8, True),
    ("lstm", 6, 20, 1, False, False, 3, 5, False),
    # one direction with steps large enough to split across the intra-op threads (rnn_kernel.h: kSplitStepFrom)
    ("lstm", 40, 256, 1, False, True, 1, 12, True),
    ("gru", 30, 256, 2, False, False, 2, 6, True),
    ("rnn_tanh", 16, 516, 1, False, True, 1, 5, True),  # 516: a tail past AVX2's and AVX-512's vectors
    ("gru", 30, 392, 1, False, False, 2, 6, True),  # MKL's product: 3 groups of units (144, 144, 104), 2 in a piece
    # rows in groups of 4, 2 and 1 over several gate panels (the product goes panel by panel, all rows in each)
    ("lstm", 9, 40, 2, True, True, 7, 4, True),
    ("gru", 24, 256, 1, False, True, 7, 3, True),
]


@pytest.fixture(scope="module", autouse=True)
def kernels():
    path = recurrent.find_library()
    assert path is not None, f"{recurrent.LIBRARY_NAME} not found: build first or set {recurrent.ENV_VAR}"
    libraries.load_ops_library(path)


def module(kind, i, h, layers, bi, bf, bias):
    if kind in ("gru", "lstm"):
        make = torch.nn.GRU if kind == "gru" else torch.nn.LSTM
        return make(i, h, layers, bias=bias, batch_first=bf, bidirectional=bi).eval()
    return torch.nn.RNN(i, h, layers, nonlinearity=kind.removeprefix("rnn_"), bias=bias, batch_first=bf,
                        bidirectional=bi).eval()


def layer_by_kernel(m, kind, layer, x, h0, c0=None, threads=()):
    """One layer of m through pt2rt::rnn_layer (lstm_layer), with the input gates as the exporter computes them.
    threads: the op's results at each of these intra-op thread counts instead (the input gates computed once: MKL's
    linear layers may round differently at another count)."""
    directions = 2 if m.bidirectional else 1
    names = [f"_l{layer}" + ("_reverse" if d else "") for d in range(directions)]
    w_ih = torch.cat([getattr(m, "weight_ih" + n) for n in names])
    b_ih = torch.cat([getattr(m, "bias_ih" + n) for n in names]) if m.bias else None
    gates = getattr(m, "weight_hh" + names[0]).shape[0]
    whh = [recurrent.pack_whh(getattr(m, "weight_hh" + n)) for n in names]
    bhh = [recurrent.pad_bhh(getattr(m, "bias_hh" + n) if m.bias else torch.zeros(gates)) for n in names]
    gi = torch.nn.functional.linear(x, w_ih, b_ih)

    def op():
        if kind == "lstm":
            return torch.ops.pt2rt.lstm_layer(gi, h0, c0, whh, bhh, m.batch_first)
        return torch.ops.pt2rt.rnn_layer(gi, h0, whh, bhh, kind, m.batch_first)
    if not threads:
        return op()
    saved, results = torch.get_num_threads(), {}
    try:
        for n in threads:
            torch.set_num_threads(n)
            results[n] = op()
    finally:
        torch.set_num_threads(saved)
    return results


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_the_kernel_gives_torchs_answer(config):
    kind, i, h, layers, bi, bf, batch, steps, bias = config
    torch.manual_seed(0)
    m = module(kind, i, h, layers, bi, bf, bias)
    d = 2 if bi else 1
    x = torch.randn(batch, steps, i) if bf else torch.randn(steps, batch, i)
    h0, c0 = torch.randn(layers * d, batch, h), torch.randn(layers * d, batch, h)
    with torch.no_grad():
        expected, expected_states = m(x, (h0, c0) if kind == "lstm" else h0)
        y, states = x, []
        for layer in range(layers):
            span = slice(layer * d, (layer + 1) * d)
            y, *last = layer_by_kernel(m, kind, layer, y, h0[span], c0[span])
            states.append(last)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=2e-6)
    if kind != "lstm":
        expected_states = (expected_states,)
    for k, e in enumerate(expected_states):
        torch.testing.assert_close(torch.cat([st[k] for st in states]), e, rtol=1e-5, atol=2e-6)


def test_non_finite_values_travel_as_in_torch():
    torch.manual_seed(1)
    for kind in ("gru", "rnn_tanh", "rnn_relu", "lstm"):
        m = module(kind, 4, 40, 1, True, False, True)
        x = torch.randn(6, 2, 4)
        x[2, 0, 1], x[4, 1, 3] = float("nan"), float("inf")
        h0 = torch.zeros(2, 2, 40)
        with torch.no_grad():
            expected = m(x, (h0, h0) if kind == "lstm" else h0)[0]
            got = layer_by_kernel(m, kind, 0, x, h0, h0)[0]
        assert torch.equal(got.isnan(), expected.isnan()), kind
        assert expected.isnan().any()
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=2e-6, equal_nan=True)


def test_bad_arguments_are_refused_naming_what():
    gi, h0 = torch.zeros(5, 2, 3 * 8), torch.zeros(1, 2, 8)
    w, b = torch.zeros(1, 8, 128), torch.zeros(128)
    with pytest.raises(RuntimeError, match="mode must be gru, rnn_tanh or rnn_relu, got 'lstm'"):
        torch.ops.pt2rt.rnn_layer(gi, h0, [w], [b], "lstm", False)
    with pytest.raises(RuntimeError, match=r"direction 0: expected W_hh packed \[1, 8, 128\] and b_hh \[128\]"):
        torch.ops.pt2rt.rnn_layer(gi, h0, [torch.zeros(8, 24)], [b], "gru", False)
    with pytest.raises(RuntimeError, match="expected 1 or 2 directions"):
        torch.ops.pt2rt.rnn_layer(gi, h0, [w, w, w], [b, b, b], "gru", False)
    with pytest.raises(RuntimeError, match="expected float32 gates and states, got Double"):
        torch.ops.pt2rt.rnn_layer(gi.double(), h0.double(), [w], [b], "gru", False)


def test_a_layer_of_no_units_gives_empty_outputs():
    """H = 0 (nothing torch.nn makes, but the op takes it): empty outputs and states, on either product."""
    gi, h0, w, b = torch.zeros(6, 2, 0), torch.zeros(1, 2, 0), torch.zeros(0, 0, 128), torch.zeros(0)
    for mode in ("gru", "rnn_tanh", "rnn_relu"):
        out, hn = torch.ops.pt2rt.rnn_layer(gi, h0, [w], [b], mode, False)
        assert out.shape == (6, 2, 0) and hn.shape == (1, 2, 0)
    out, hn, cn = torch.ops.pt2rt.lstm_layer(gi, h0, h0, [w], [b], False)
    assert out.shape == (6, 2, 0) and hn.shape == cn.shape == (1, 2, 0)


class Stack(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        kind, i, h, layers, bi, bf, _, _, bias = config
        self.rnn = module(kind, i, h, layers, bi, bf, bias)
        self.head = torch.nn.Linear(h * (2 if bi else 1), 3)

    def forward(self, x, h0):
        y, hn = self.rnn(x, (h0, torch.tanh(h0)) if isinstance(self.rnn, torch.nn.LSTM) else h0)
        return self.head(y), hn


@pytest.mark.parametrize("config", CONFIGS[:1] + CONFIGS[2:], ids=lambda c: "-".join(map(str, c)))
def test_the_rewritten_graph_gives_the_eager_answer_with_one_call_per_layer(config):
    kind, i, h, layers, bi, bf, batch, steps, bias = config
    torch.manual_seed(2)
    model = Stack(config).eval()
    d = 2 if bi else 1
    x = torch.randn(batch, steps, i) if bf else torch.randn(steps, batch, i)
    h0 = torch.randn(layers * d, batch, h)
    ep = recurrent.fuse(torch.export.export(model, (x, h0), strict=False))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    op = torch.ops.pt2rt.lstm_layer.default if kind == "lstm" else torch.ops.pt2rt.rnn_layer.default
    assert targets.count(op) == layers
    assert not any(t in recurrent._MODES for t in targets)
    with torch.no_grad():
        expected = model(x, h0)
        got = ep.module()(x, h0)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=2e-6)


def test_without_the_library_the_layers_stay_torchs_with_a_warning(monkeypatch):
    model = Stack(CONFIGS[0]).eval()
    args = (torch.randn(7, 2, 5), torch.randn(1, 2, 6))
    monkeypatch.setattr(recurrent, "find_library", lambda: None)
    monkeypatch.setattr(recurrent, "_registered", lambda: False)  # as in a process that never loaded it
    said = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())
    logging.getLogger("export_tools").addHandler(handler)
    try:
        ep = recurrent.fuse(torch.export.export(model, args, strict=False))
    finally:
        logging.getLogger("export_tools").removeHandler(handler)
    assert any(n.target is torch.ops.aten.gru.input for n in ep.graph.nodes)
    assert len(said) == 1 and "libpt2rt_kernels.so not found" in said[0] and "left as inductor" in said[0], said


def test_a_kernels_library_named_that_does_not_exist_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv(recurrent.ENV_VAR, str(tmp_path / "nope.so"))
    with pytest.raises(OpsLibraryError, match=f"{recurrent.ENV_VAR}=.*nope.so does not name a file"):
        recurrent.find_library()


def test_training_mode_and_other_dtypes_are_left_to_torch():
    model = Stack(CONFIGS[0]).double().eval()
    args = (torch.randn(7, 2, 5, dtype=torch.float64), torch.randn(1, 2, 6, dtype=torch.float64))
    ep = recurrent.fuse(torch.export.export(model, args, strict=False))
    assert any(n.target is torch.ops.aten.gru.input for n in ep.graph.nodes)
    training = torch.nn.GRU(5, 6, 2, dropout=0.5).train()  # dropout between the layers: torch's to run
    ep = recurrent.fuse(torch.export.export(training, (torch.randn(7, 2, 5),), strict=False))
    assert any(n.target is torch.ops.aten.gru.input for n in ep.graph.nodes)


def test_a_dynamic_batch_and_sequence_trace_through_the_kernels():
    """The kernels' shapes for tracing are symbolic (export_tools.recurrent's register_fake): a model with a dynamic
    batch exports, and its graph runs other batch sizes."""
    torch.manual_seed(3)
    model = Stack(("gru", 5, 6, 2, True, True, 0, 0, True)).eval()
    batch = torch.export.Dim("batch", min=1, max=16)
    ep = recurrent.fuse(torch.export.export(model, (torch.randn(2, 7, 5), torch.randn(4, 2, 6)),
                                            dynamic_shapes=({0: batch}, {1: batch}), strict=False))
    redone = torch.export.export(ep.module(), (torch.randn(3, 7, 5), torch.randn(4, 3, 6)),
                                 dynamic_shapes=({0: batch}, {1: batch}), strict=False)
    x, h0 = torch.randn(5, 7, 5), torch.randn(4, 5, 6)
    with torch.no_grad():
        for g, e in zip(redone.module()(x, h0), model(x, h0)):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("config", [c for c in CONFIGS if c[2] >= 256 and not c[4]], ids=lambda c: c[0])
def test_steps_split_across_threads_give_one_threads_answer_bit_for_bit(config):
    """A single direction splits each step across the intra-op threads - the kernel's product by gate panels, then
    the update by units; MKL's product and the update together by groups of units - and each value is computed as
    one thread computes it, whatever the thread count, NaN included."""
    kind, i, h, layers, bi, bf, batch, steps, bias = config
    torch.manual_seed(2)
    m = module(kind, i, h, 1, bi, bf, bias)
    x = torch.randn(batch, steps, i) if bf else torch.randn(steps, batch, i)
    (x[:, -1] if bf else x[-1])[0, 0] = float("nan")  # the last step: the steps before it stay finite
    h0, c0 = torch.randn(1, batch, h), torch.randn(1, batch, h)
    with torch.no_grad():
        results = layer_by_kernel(m, kind, 0, x, h0, c0, threads=(1, 2, 3))
    assert results[1][0].isnan().any() and not results[1][0].isnan().all()
    for threads in (2, 3):
        for got, one in zip(results[threads], results[1]):
            if one is not None and one.numel():
                assert torch.equal(got.nan_to_num(7.0), one.nan_to_num(7.0)), (kind, threads)
                assert torch.equal(got.isnan(), one.isnan()), (kind, threads)


def _in_a_process(env, body):
    import os
    import subprocess
    import sys
    script = ("import sys; sys.path.insert(0, 'tests/python'); import test_recurrent as t\n"
              "from export_tools import libraries, recurrent\n"
              "libraries.load_ops_library(recurrent.find_library())\n" + body)
    return subprocess.run([sys.executable, "-c", script], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=300)


def test_the_kernel_of_every_isa_gives_torchs_answer():
    """The recurrence is compiled per ISA and chosen once per process (ATEN_CPU_CAPABILITY caps it): each one this
    CPU runs, in a process of its own, with its own recurrent product (PT2RT_RNN_PRODUCT=own)."""
    body = "for c in t.CONFIGS: t.test_the_kernel_gives_torchs_answer(c)\nt.test_non_finite_values_travel_as_in_torch()\n"
    # torch takes ATEN_CPU_CAPABILITY as it is: past what the CPU has, its own kernels stop the process (SIGILL)
    flags = _cpu_flags()
    needs = {"default": set(), "avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}
    for isa in (isa for isa, flags_needed in needs.items() if flags_needed <= flags):
        done = _in_a_process({"ATEN_CPU_CAPABILITY": isa, "PT2RT_RNN_PRODUCT": "own"}, body)
        assert done.returncode == 0, f"ATEN_CPU_CAPABILITY={isa}: {done.stderr[-2000:]}"


def _cpu_flags() -> set[str]:
    return set(re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.M).group(1).split())


def test_mkls_product_gives_torchs_answer_the_same_on_any_number_of_threads(tmp_path):
    """From 2 rows and 4 steps the recurrent product is MKL's packed one where MKL runs its AVX2 / AVX-512 code (the
    runtime's libpt2rt makes it do so on AMD too); PT2RT_RNN_PRODUCT=mkl takes it for every layer, whatever code MKL
    runs in this process: here twice, as MKL chooses in a bare process (its generic code on AMD) and with the vendor
    check answered as libpt2rt answers it (its AVX2 / AVX-512 code; MKL rounds by its thread count there)."""
    if not torch.backends.mkl.is_available():
        pytest.skip("this torch has no MKL (not x86-64)")
    import subprocess
    body = ("for c in t.CONFIGS: t.test_the_kernel_gives_torchs_answer(c)\n"
            "t.test_non_finite_values_travel_as_in_torch()\n"
            "t.test_a_layer_of_no_units_gives_empty_outputs()\n"
            "for c in t.CONFIGS:\n"
            "    if c[2] >= 256 and not c[4]: t.test_steps_split_across_threads_give_one_threads_answer_bit_for_bit(c)\n")
    done = _in_a_process({"PT2RT_RNN_PRODUCT": "mkl"}, body)
    assert done.returncode == 0, done.stderr[-2000:]
    if {"avx2", "fma"} <= _cpu_flags():
        stub = tmp_path / "vendor.c"
        stub.write_text("int mkl_serv_intel_cpu_true(void) { return 1; }\n")  # runtime/src/mkl_vendor.cpp's answer
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libvendor.so"), str(stub)], check=True)
        fast = ("import ctypes, os\n"
                "lib = ctypes.CDLL(os.path.join(os.path.dirname(t.torch.__file__), 'lib', 'libtorch_cpu.so'))\n"
                "assert lib.mkl_serv_cbwr_get_auto_branch() >= 10, 'MKL runs its generic code'\n")
        done = _in_a_process({"PT2RT_RNN_PRODUCT": "mkl", "LD_PRELOAD": str(tmp_path / "libvendor.so")}, fast + body)
        assert done.returncode == 0, "MKL's AVX2 / AVX-512 code: " + done.stderr[-2000:]
    done = _in_a_process({"PT2RT_RNN_PRODUCT": "fastest"}, "t.test_the_kernel_gives_torchs_answer(t.CONFIGS[0])\n")
    assert done.returncode != 0 and "PT2RT_RNN_PRODUCT must be own or mkl (or unset), got 'fastest'" in done.stderr, \
        done.stderr[-2000:]


def test_one_transpose_per_weight_so_each_is_packed_once():
    """Without the kernel, inductor's packing patterns transpose a weight per product they pack; the transposes of
    one constant merge into one (passes._one_pack_per_weight), which inductor's duplicate elimination then packs
    once."""
    from export_tools import passes

    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    w, other = g.get_attr("w"), g.get_attr("other")
    uses = [g.call_function(aten.permute.default, (w, [1, 0])) for _ in range(5)]
    kept = g.call_function(aten.permute.default, (other, [1, 0]))
    dims = g.call_function(aten.permute.default, (w, [0, 1]))  # another transpose of w: its own
    outs = [g.call_function(aten.mm.default, (x, t)) for t in [*uses, kept, dims]]
    g.output(outs)
    assert passes._one_pack_per_weight(g) == 4
    transposes = [n for n in g.nodes if n.target is aten.permute.default]
    assert len(transposes) == 3
    assert len({o.args[1] for o in outs[:5]}) == 1


def test_an_lstm_with_projections_is_left_to_torch():
    model = torch.nn.LSTM(5, 8, proj_size=3).eval()
    ep = recurrent.fuse(torch.export.export(model, (torch.randn(4, 1, 5),), strict=False))
    assert any(n.target is torch.ops.aten.lstm.input for n in ep.graph.nodes)
