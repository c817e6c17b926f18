"""export_tools.export_package: graph, spec, golden cases, running the package, state, all-or-nothing."""

import json
import zipfile

import jsonschema
import pytest
import torch

import export_tools
from export_tools import ExportError, cpu, export_package, export_program, load_package, read_spec, verify_package
from my_ops import models
from export_tools.package import read_golden

SCHEMA = json.loads((__import__("pathlib").Path(__file__).parents[2] / "docs" / "pt2rt-spec-2.schema.json").read_text())


def test_graph_calls_the_class_through_call_torchbind_and_the_op_directly():
    model, inputs = models.identity_conv_net()
    ep = export_program(model, inputs, dynamic_batch=(1, 32))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert torch.ops.higher_order.call_torchbind in targets
    assert torch.ops.my_ops.identity_conv_op.default in targets
    torchbind = next(n for n in ep.graph.nodes if n.target is torch.ops.higher_order.call_torchbind)
    assert torchbind.args[1] == "forward"
    assert targets.index(torch.ops.higher_order.call_torchbind) < targets.index(torch.ops.my_ops.identity_conv_op.default)


def test_spec_matches_schema_and_model(exported):
    path, model, inputs = exported("net_dynamic")
    spec = read_spec(path)
    jsonschema.validate(spec, SCHEMA)
    assert spec["format"] == "pt2rt-spec/2" and spec["device"] == "cpu" and spec["model"] == "net_dynamic"
    assert spec["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 3, 32, 32],
                               "dynamic_dims": [{"dim": 0, "name": "batch", "min": 1, "max": 32}]}]
    assert spec["outputs"][0]["shape"] == [-1, 8, 32, 32]
    assert spec["outputs"][0]["dynamic_dims"][0]["name"] == "batch"
    # the schemas as ops/my_ops.cpp and identity_conv_class.cpp define them
    assert spec["custom_ops"] == [{"name": "my_ops::identity_conv_op", "overload": "", "namespace": "my_ops",
                                   "schema": "my_ops::identity_conv_op(Tensor x) -> Tensor",
                                   "library": "libidentity_conv_ops.so"}]
    cls = "__torch__.torch.classes.my_ops.IdentityConvClass"
    assert spec["custom_classes"] == [{
        "name": "my_ops::IdentityConvClass", "namespace": "my_ops", "methods": ["forward"],
        "method_schemas": {"__getstate__": f"__getstate__({cls} _0) -> ((int, Tensor) _0)",
                           "__setstate__": f"__setstate__({cls} _0, (int, Tensor) _1) -> NoneType _0",
                           "forward": f"forward({cls} _0, Tensor _1) -> Tensor _0"},
        "library": "libidentity_conv_ops.so"}]
    assert spec["libraries"] == ["libidentity_conv_ops.so"]
    assert spec["torch_version"] == torch.__version__
    assert spec["metadata"] == {"purpose": "tests"}
    assert [(v["isa"], v["model"]) for v in spec["variants"]] == [
        ("avx2", "model"), ("avx512", "avx512_model"), ("default", "default_model")]
    assert all(v["arch"] == "x86_64" for v in spec["variants"])


def test_spec_records_each_variant_library_hash(exported):
    import hashlib
    path, _, _ = exported("net_dynamic")
    spec = read_spec(path)
    digests = set()
    with zipfile.ZipFile(path) as zf:
        libraries = [n for n in zf.namelist() if n.endswith(".so")]
        assert len(libraries) == len(spec["variants"]) == 3
        for v in spec["variants"]:
            name = next(n for n in libraries if n.endswith("/" + v["record"]))
            data = zf.read(name)
            assert hashlib.sha256(data).hexdigest() == v["sha256"] and len(data) == v["size"]
            digests.add(v["sha256"])
    assert len(digests) == 3, "two variants hold the same library"


def test_spec_is_also_what_the_aoti_loader_reports(exported):
    path, _, _ = exported("net_dynamic")
    runner = load_package(path)
    assert json.loads(runner.get_metadata()["pt2rt_spec"]) == read_spec(path)


def test_golden_cases_round_trip(exported):
    path, model, inputs = exported("net_dynamic")
    cases = read_golden(path)
    assert [c.name for c in cases] == read_spec(path)["golden"]["names"]
    assert len(cases) == 4
    assert cases[0].name == "example" and torch.equal(cases[0].inputs[0], inputs[0])
    assert [c.inputs[0].shape[0] for c in cases[1:]] == [1, 32, 17]  # min, max, then between
    with torch.no_grad():
        for case in cases:
            torch.testing.assert_close(case.outputs[0], model(*case.inputs))


def test_package_runs_in_python_across_the_dynamic_range(exported):
    path, model, _ = exported("net_dynamic")
    runner = load_package(path)
    for batch in (1, 2, 7, 31, 32):
        x = torch.randn(batch, 3, 32, 32)
        with torch.no_grad():
            torch.testing.assert_close(runner(x), model(x))


def test_verify_report_passes_for_every_variant_this_cpu_runs(exported):
    path, _, _ = exported("net_dynamic")
    report = verify_package(path)
    runnable = [v["isa"] for v in read_spec(path)["variants"] if not cpu.runs_here(v["arch"], v["cpu_features"])]
    assert "avx2" in runnable and "default" in runnable  # every x86-64 host that runs the tests has AVX2
    cases = read_spec(path)["golden"]["count"]
    assert [r["variant"] for r in report] == [isa for isa in runnable for _ in range(cases)]
    assert all(r["passed"] for r in report), report
    assert all(r["max_abs_error"] < 1e-4 for r in report)


def test_class_state_travels_in_the_package(exported):
    path, model, inputs = exported("net_dynamic")
    runner = load_package(path)
    x = inputs[0]
    with torch.no_grad():
        expected = model(x)
        identity = models.IdentityConvNet().eval()
        identity.conv.load_state_dict(model.conv.state_dict())  # same conv, identity depthwise weight
        without_state = identity(x)
    out = runner(x)
    torch.testing.assert_close(out, expected)
    assert (out - without_state).abs().max() > 1e-2, "the depthwise weight did not travel"
    # the package holds a copy: changing the model afterwards changes nothing
    model.depthwise.set_weight(torch.zeros(3, 1, 3, 3))
    torch.testing.assert_close(load_package(path)(x), expected)


def test_op_only_static_package(exported):
    path, model, inputs = exported("op_static")
    spec = read_spec(path)
    jsonschema.validate(spec, SCHEMA)
    assert spec["inputs"][0]["shape"] == [2, 3, 16, 16] and spec["inputs"][0]["dynamic_dims"] == []
    assert spec["custom_classes"] == [] and [o["name"] for o in spec["custom_ops"]] == ["my_ops::identity_conv_op"]
    assert spec["golden"]["count"] == 4
    report = verify_package(path)
    assert report and all(r["passed"] for r in report)
    torch.testing.assert_close(load_package(path)(inputs[0]), inputs[0])


@pytest.mark.parametrize("name, dtype, isa", [("net_fp16", "float16", "avx2"), ("net_bf16", "bfloat16", "default")])
def test_half_precision_exports(exported, name, dtype, isa):
    path, model, inputs = exported(name)
    spec = read_spec(path)
    jsonschema.validate(spec, SCHEMA)
    assert spec["inputs"][0]["dtype"] == dtype and spec["outputs"][0]["dtype"] == dtype
    assert [v["isa"] for v in spec["variants"]] == [isa]
    assert dtype in spec["golden"]["tolerances"]
    report = verify_package(path)
    assert report and all(r["passed"] for r in report)


def test_a_package_none_of_whose_variants_runs_here_is_not_written(tmp_path, monkeypatch):
    # This CPU as an AVX2-only one: an avx512-only package cannot be verified before it is written.
    avx2_host = frozenset(cpu.features_for_flags(("-march=x86-64-v3",)))
    monkeypatch.setattr(cpu, "host_features", lambda: avx2_host)
    model, inputs = models.identity_conv_op_only()
    with pytest.raises(ExportError, match="none of the package's CPU variants runs on this machine.*"
                                          "avx512 needs avx512bw, avx512cd, avx512dq, avx512f, avx512vl"):
        export_package(model, inputs, tmp_path / "m.pt2", cpu_isa="avx512")
    assert list(tmp_path.iterdir()) == []


class NotReproducible(torch.nn.Module):
    """Random output: the compiled package cannot match the eager golden outputs, so verification fails."""

    def forward(self, x):
        return torch.ops.my_ops.identity_conv_op(x) + torch.rand_like(x)


def test_failed_verification_leaves_nothing_behind(tmp_path):
    target = tmp_path / "m.pt2"
    target.write_bytes(b"previous package")
    with pytest.raises(ExportError, match="does not reproduce the eager model"):
        export_package(NotReproducible(), (torch.randn(1, 2, 4, 4),), target, golden=2)
    assert target.read_bytes() == b"previous package"  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]  # no temporary left


@pytest.mark.parametrize("kwargs, message", [
    (dict(dynamic_batch=(0, 4)), "1 <= min <= max, got 0:4"),
    (dict(dynamic_batch=(5, 4)), "1 <= min <= max, got 5:4"),
    (dict(dynamic_batch=(3, 8)), "example input 0 has batch 2, outside the dynamic batch range 3:8"),
    (dict(golden=0), "expected golden >= 1, got 0"),
    (dict(cpu_isa="sse9"), "unknown cpu_isa 'sse9': expected native, avx512, avx2, default"),
    (dict(cpu_isa="avx2,avx2"), "cpu_isa lists a variant twice: avx2, avx2"),
    (dict(cpu_isa=()), "expected one or more CPU ISA names, got ()"),
    (dict(device="tpu"), "expected device cpu or cuda, got 'tpu'"),
    (dict(metadata={"k": 1}), "expected metadata as a dict of str to str"),
    (dict(golden_inputs=torch.zeros(1)), "expected golden_inputs as a list of input tuples, got Tensor"),
    (dict(golden_inputs=[(torch.zeros(1), torch.zeros(1))]), "golden_inputs[0]: expected 1 inputs like the example's, got 2"),
    (dict(golden_inputs=[[3]]), "golden_inputs[0]: expected a tuple of tensors like the example inputs"),
    (dict(golden_inputs=[torch.zeros(2, 3, dtype=torch.int64)]), "golden_inputs[0] input 0: expected torch.float32 with 4 dims"),
])
def test_bad_arguments(tmp_path, kwargs, message):
    model, inputs = models.identity_conv_op_only()
    with pytest.raises(ExportError, match=__import__("re").escape(message)):
        export_package(model, inputs, tmp_path / "m.pt2", **kwargs)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_cuda_device_without_gpu_is_refused(tmp_path):
    model, inputs = models.identity_conv_op_only()
    with pytest.raises(ExportError, match="device cuda was asked for, but torch sees no CUDA device"):
        export_package(model, inputs, tmp_path / "m.pt2", device="cuda")


def test_wrong_path_suffix(tmp_path):
    model, inputs = models.identity_conv_op_only()
    with pytest.raises(ExportError, match="ending in .pt2"):
        export_package(model, inputs, tmp_path / "m.zip")


def test_export_package_is_exported_at_top_level():
    assert export_tools.export_package is export_package


def test_golden_compare_takes_integers_and_bools_exactly_whatever_the_tolerances():
    from export_tools import golden
    big = torch.tensor([2**53 + 4, 7])
    loose = {"int64": (0.5, 5.0), "bool": (1.0, 1.0)}
    assert golden.compare([big], [big.clone()], loose)[0]
    assert not golden.compare([big], [big + torch.tensor([1, 0])], loose)[0]  # 2^53+5 == 2^53+4 in double
    flags = torch.tensor([True, False])
    assert not golden.compare([flags], [flags.logical_not()], loose)[0]
    x = torch.tensor([1.0, 2.0])
    assert golden.compare([x], [x + 1e-3], {"float32": (0.0, 1e-2)})[0]  # floats keep their tolerance


def test_an_op_no_loaded_library_provides_is_refused_with_what_to_do(tmp_path):
    """Ops defined in Python (or by a library export_tools cannot attribute) have no library to record."""
    lib = torch.library.Library("pt2rt_pyonly", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.pt2rt_pyonly.twice(x)

    with pytest.raises(ExportError, match="the graph uses custom namespace 'pt2rt_pyonly', but which ops library "
                                          "provides it is not known .*export_tools.load_ops_library"):
        export_package(M(), (torch.randn(2),), tmp_path / "m.pt2")
    assert not (tmp_path / "m.pt2").exists()


def test_the_library_of_each_namespace_is_found_however_it_was_loaded():
    """my_ops loads its library with torch.ops.load_library: found by the source path its namespace was defined at."""
    from export_tools import libraries
    import my_ops
    assert libraries.provider_of("my_ops") == my_ops.library_path()
    with pytest.raises(libraries.OpsLibraryError, match="'aten'"):
        libraries.provider_of("aten")


def test_the_version_is_the_version_file(exported):
    from pathlib import Path
    version = (Path(export_tools.__file__).resolve().parent.parent / "VERSION").read_text().strip()
    assert export_tools.__version__ == version
    assert read_spec(exported("op_static")[0])["created_by"] == f"export_tools {version}"


def test_a_batch_one_example_exports_with_a_dynamic_batch(tmp_path):
    """torch.export specialises a size-1 example dim; the exporter traces with the example doubled instead. The
    user's example stays the first golden case, batch 1 and 8 both run, and the caller's module keeps its mode.
    Python's default warning filters show no FutureWarning of torch's internals on the way."""
    import warnings
    model, (x,) = models.identity_conv_net()
    model.train()
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()  # Python's defaults: FutureWarning shown, DeprecationWarning not
        warnings.simplefilter("default", FutureWarning)
        path = export_package(model, (x[:1],), tmp_path / "bs1.pt2", dynamic_batch=(1, 8), golden=3,
                              cpu_isa="default")
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []
    assert model.training
    spec = read_spec(path)
    assert spec["inputs"][0]["shape"] == [-1, 3, 32, 32]
    assert spec["inputs"][0]["dynamic_dims"] == [{"dim": 0, "name": "batch", "min": 1, "max": 8}]
    torch.testing.assert_close(read_golden(path)[0].inputs[0], x[:1], rtol=0, atol=0)
    runner = load_package(path)
    model.eval()
    for batch in (1, 8):
        xb = torch.randn(batch, 3, 32, 32)
        with torch.no_grad():
            torch.testing.assert_close(runner(xb), model(xb))


def test_the_callers_model_keeps_its_mode_when_export_fails(tmp_path):
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise ValueError("no")

    model = Broken().train()
    with pytest.raises(ExportError, match="the model fails on its example inputs"):
        export_package(model, (torch.randn(2),), tmp_path / "m.pt2")
    assert model.training


def test_golden_inputs_outside_the_package_shapes_are_refused_before_compiling(tmp_path):
    model, (x,) = models.identity_conv_net()
    wrong_static = torch.randn(2, 3, 16, 32)
    with pytest.raises(ExportError, match=r"golden_inputs\[0\] input 0 \(x\): dim 2 is static \(32\), got 16"):
        export_package(model, (x,), tmp_path / "m.pt2", dynamic_batch=(1, 4), golden_inputs=[(wrong_static,)])
    with pytest.raises(ExportError, match=r"golden_inputs\[1\] input 0 \(x\): dim 0 \(batch\) must be in 1..4, got 5"):
        export_package(model, (x,), tmp_path / "m.pt2", dynamic_batch=(1, 4),
                       golden_inputs=[(torch.randn(1, 3, 32, 32),), (torch.randn(5, 3, 32, 32),)])
    assert list(tmp_path.iterdir()) == []


def test_generated_masks_and_ids_follow_the_example_and_keep_a_padded_transformer_finite():
    """A standard padded TransformerEncoder from a batch-1 example: coin-flip masks padded whole rows (eager NaN,
    the export failed); generated bool and integer inputs now tile the example's own pattern."""
    from export_tools import golden

    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    x = torch.randn(1, 6, 8)
    mask = torch.tensor([[False, False, False, False, True, True]])
    spec_inputs = [{"name": n, "dynamic_dims": [{"dim": 0, "name": "batch", "min": 1, "max": 8},
                                                 {"dim": 1, "name": "seq", "min": 2, "max": 32}]} for n in ("x", "mask")]
    sizes = [("min", {"batch": 1, "seq": 2}), ("max_batch", {"batch": 8, "seq": 2}),
             ("max_seq", {"batch": 1, "seq": 32}), ("mid", {"batch": 5, "seq": 17})]

    def run(inputs):
        with torch.no_grad():
            return [encoder(inputs[0], src_key_padding_mask=inputs[1])]

    given = [(torch.randn(2, 4, 8), torch.tensor([[False, False, True, True], [False, False, False, False]]))]
    cases, _ = golden.make_cases(run, [x, mask], spec_inputs, sizes + [("again", {"batch": 2, "seq": 4})],
                                 given=given)
    assert [c.name for c in cases] == ["example", "given_0", "min_batch=1_seq=2", "max_batch_batch=8_seq=2",
                                       "max_seq_batch=1_seq=32", "mid_batch=5_seq=17"]  # the given sizes not again
    for c in cases:
        assert torch.isfinite(c.outputs[0]).all(), c.name
        assert torch.equal(c.inputs[1], golden.tiled_like(mask, list(c.inputs[1].shape))) or c.name == "given_0"
    assert golden.tiled_like(mask, [2, 9]).tolist() == [[False] * 4 + [True] * 2 + [False] * 3] * 2
    ids = torch.tensor([[5, 9, 2]])
    assert golden.random_like(ids, [2, 5], torch.Generator()).tolist() == [[5, 9, 2, 5, 9]] * 2


def test_a_case_that_differs_only_where_eager_is_not_finite_says_so():
    from export_tools import golden

    expected = torch.tensor([[1.0, 2.0], [float("nan"), float("nan")]])
    actual = torch.tensor([[1.0, 2.0], [0.5, 0.25]])
    passed, _, _, reason = golden.compare([actual], [expected])
    assert not passed
    assert reason.startswith("output 0: " + golden.NONFINITE_HINT), reason
    assert "the eager model gives 2 non-finite values where the package is finite, the package 0 where eager is" in reason
    passed, _, _, reason = golden.compare([actual + 1], [expected])
    assert not passed and golden.NONFINITE_HINT not in reason, reason  # finite values that differ too: the plain one


def test_a_dynamic_sequence_through_an_lstm_names_torchs_limit(tmp_path):
    class Rnn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(4, 8, batch_first=True)

        def forward(self, feats):
            return self.lstm(feats)[0]

    seq = torch.export.Dim("seq", min=1, max=200)
    with pytest.raises(ExportError) as err:
        export_package(Rnn().eval(), (torch.randn(1, 50, 4),), tmp_path / "m.pt2", dynamic_shapes=({1: seq},))
    message = str(err.value)
    assert "it fixes seq at 50, the example's size. The model has LSTM: torch.export specializes the sequence " \
           "length of torch's RNN modules (torch's limit, not your model's)" in message, message
    assert "only runs" not in message
    assert list(tmp_path.iterdir()) == []




class RecurrentStack(torch.nn.Module):
    """GRU, plain RNN and LSTM layers (bidirectional, 256 wide, batch first) one after the other."""

    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(64, 256, 2, batch_first=True, bidirectional=True)
        self.rnn = torch.nn.RNN(512, 256, batch_first=True, bidirectional=True)
        self.lstm = torch.nn.LSTM(512, 256, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(512, 8)

    def forward(self, x):
        return self.head(self.lstm(self.rnn(self.gru(x)[0])[0])[0])


def test_recurrent_layers_hold_each_weight_once(tmp_path):
    """inductor unrolls a GRU or RNN layer, a product per step by one recurrent weight; packed for oneDNN, each step
    held its own copy (a 2-layer bidirectional GRU tagger over 64 steps: 217 MB for 19 MB of weights). Now the GRU and
    RNN layers are one pt2rt::rnn_layer call each (export_tools.recurrent), the LSTM one pt2rt::lstm_layer, and each weight
    is held once: the package stays within 1.5x its weights + 10 MB (here 16 steps: 72 MB when copied per step), and
    matches eager (the export's golden check). test_recurrent.py: one transpose per weight, so
    each is packed once, without the kernel too."""
    from export_tools.export import CONSTANTS_FACTOR, CONSTANTS_SLACK_BYTES, weights_bytes

    torch.manual_seed(0)
    model = RecurrentStack().eval()
    path = export_package(model, (torch.randn(1, 16, 64),), tmp_path / "rnn.pt2", golden=2)
    ops = sorted((op["name"], op["library"]) for op in read_spec(path)["custom_ops"])
    assert [op for op in ops if op[0] != "pt2rt::linear"] == \
        [("pt2rt::lstm_layer", "libpt2rt_kernels.so"), ("pt2rt::rnn_layer", "libpt2rt_kernels.so")]
    with zipfile.ZipFile(path) as z:
        library = sum(i.file_size for i in z.infolist() if i.filename.endswith(".so"))
    weights = weights_bytes(model)
    assert weights > 6e6
    assert library <= CONSTANTS_FACTOR * weights + CONSTANTS_SLACK_BYTES, (library, weights)


def test_a_library_past_its_weights_is_named_with_the_constant_that_repeats():
    from export_tools.export import _constants_problem

    mb = 2**20
    assert _constants_problem("native", 20 * mb, 7 * mb, []) == ""
    per_step = [((768, 256), "float32", 786432)] * 256 + [((32,), "float32", 128)]
    problem = _constants_problem("native", 206 * mb, 7 * mb, per_step)
    assert problem.startswith("the native model library is 216.0 MB for 7.3 MB of parameters and buffers "
                              "(expected at most 1.5x + 10 MB); most of it 256 constants of shape [768, 256] "
                              "float32 (201.3 MB)"), problem
    assert "\n" not in problem


def test_products_are_rewritten_where_atens_form_is_slow():
    """export_tools.passes.ProductRewrites on a traced graph: a linear layer's addmm becomes mm + add, the 1x1
    stride-1 convolution's bias moves to an add after it (NaN travelling as before); the 3x3 and the strided 1x1
    convolutions keep theirs; a linear layer on transposed rows (bmm by the weight expanded over the batch) becomes
    one mm."""
    from export_tools.passes import ProductRewrites, SharedWeightProducts

    aten = torch.ops.aten
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.Conv2d(8, 6, 1), torch.nn.ReLU(),
                                torch.nn.Conv2d(6, 5, 1, stride=2), torch.nn.Flatten(), torch.nn.Linear(45, 7)).eval()
    x = torch.randn(2, 4, 5, 5)
    ep = torch.export.export(model, (x,)).run_decompositions()  # the ATen graph inductor starts from
    gm = ep.graph_module
    assert gm.graph.find_nodes(op="call_function", target=aten.addmm.default)
    ProductRewrites()(gm.graph)
    gm.recompile()
    convs = gm.graph.find_nodes(op="call_function", target=aten.convolution.default)
    assert [c.args[2] is None for c in convs] == [False, True, False]
    (add,) = convs[1].users
    assert add.target is aten.add.Tensor and add.meta["val"].shape == (2, 6, 5, 5)
    assert not gm.graph.find_nodes(op="call_function", target=aten.addmm.default)
    (mm,) = gm.graph.find_nodes(op="call_function", target=aten.mm.default)
    assert [u.target for u in mm.users] == [aten.add.Tensor] and mm.meta["val"].shape == (2, 7)
    x[0, 0, 1, 1] = float("nan")
    with torch.no_grad():
        got, expected = ep.module()(x), model(x)
    assert torch.equal(got.isnan(), expected.isnan()) and expected.isnan().any()
    assert torch.allclose(got, expected, atol=1e-6, equal_nan=True)

    class TransposedRows(torch.nn.Module):  # what a batch-first nn.MultiheadAttention does with its input
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 24)

        def forward(self, x):
            return self.linear(x.transpose(0, 1)).relu()

    model, x = TransposedRows().eval(), torch.randn(3, 5, 16)
    for dynamic, rewrite in ((None, ProductRewrites()), (None, SharedWeightProducts()),
                             (({0: torch.export.Dim("batch", min=2, max=8)},), ProductRewrites())):  # dynamic rows
        ep = torch.export.export(model, (x,), dynamic_shapes=dynamic).run_decompositions()
        assert ep.graph.find_nodes(op="call_function", target=aten.bmm.default)
        rewrite(ep.graph_module.graph)
        ep.graph_module.recompile()
        assert not ep.graph.find_nodes(op="call_function", target=aten.bmm.default)
        (mm,) = ep.graph.find_nodes(op="call_function", target=aten.mm.default)
        assert mm.meta["val"].shape[1] == 24
        # the linear layer's own weight, transposed, as freezing packs it (not a slice of its expansion)
        assert (mm.args[1].target, mm.args[1].args[0].op) == (aten.permute.default, "placeholder")
        with torch.no_grad():
            for batch in (3, 6) if dynamic else (3,):
                other = torch.randn(batch, 5, 16)
                assert torch.allclose(ep.module()(other), model(other), atol=1e-6)


class _Activations(torch.nn.Module):
    """Dense 3x3 convolutions (packed where export_tools packs) followed by each activation inductor would fuse
    into oneDNN's call, a residual add, a depthwise convolution and its ReLU (pt2rt's kernel, one call:
    export_tools.convolutions), then a grouped convolution (never packed) and a 1x1 one with its batch norm and ReLU
    (pt2rt's kernel), a linear layer with a ReLU over the last dimension and an LSTM over the rows (both packed)."""

    def __init__(self):
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(4, 4, 3, padding=1) for _ in range(5))
        self.bn = torch.nn.BatchNorm2d(4)
        self.depthwise = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.grouped = torch.nn.Conv2d(4, 4, 3, padding=1, groups=2)
        self.pointwise = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 1), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
        self.head = torch.nn.Linear(12, 6)
        self.rnn = torch.nn.LSTM(6, 5, batch_first=True)

    def forward(self, x):
        a = torch.relu(self.bn(self.convs[0](x)))
        b = torch.nn.functional.relu6(self.convs[1](a))
        c = torch.nn.functional.hardsigmoid(self.convs[2](b))
        d = torch.relu(self.convs[3](c) + a)
        e = torch.nn.functional.hardtanh(self.convs[4](d), -0.5, 0.5)
        f = torch.relu(self.head(
            torch.cat([a, b, c, d, e, self.pointwise(self.grouped(torch.relu(self.depthwise(e))))], 1)))
        return self.rnn(f.flatten(0, 1))[0]  # 24 sequences of 12 steps


def test_weights_are_packed_only_in_variants_for_the_build_machines_cpu_class(monkeypatch):
    """oneDNN lays packed weights out for the CPU class it runs on (another class at run time: a reference kernel,
    15x slower), so only the native variant (and the avx512 one built on an AVX-512 machine) packs, for the class
    the spec then names (packed_for)."""
    from export_tools import cpu, passes

    def variant(name, arch="x86_64"):
        return cpu.Variant(name=name, arch=arch, vec_isa="", flags=(), cpu_features=())

    avx512 = frozenset({"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"})
    monkeypatch.setattr(cpu, "host_arch", lambda: "x86_64")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(cpu, "host_features", lambda: avx512)
    assert [passes.packing_class(variant(n)) for n in ("native", "avx512", "avx2", "default")] == \
        ["avx512", "avx512", None, None]
    assert passes.packing_class(variant("neon", "aarch64")) is None and passes.packing_class(None) is None
    for cap, cls in (("AVX2", "avx2"), ("avx2_vnni", "avx2"), ("SSE41", None), ("AVX512_CORE_AMX", "avx512"),
                     ("ALL", "avx512"), ("avx-2", "avx512")):  # not one of oneDNN's names: no cap
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)  # oneDNN's cap, as oneDNN reads it
        assert passes.onednn_class() == cls, cap
        assert passes.packing_class(variant("native")) is None  # nothing packed while oneDNN is capped
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")
    assert passes.onednn_class() == "avx2"
    monkeypatch.delenv("DNNL_MAX_CPU_ISA")
    monkeypatch.setattr(cpu, "host_features", lambda: frozenset({"avx", "avx2", "fma"}))  # an AVX2 machine
    assert [passes.packing_class(variant(n)) for n in ("native", "avx512", "avx2", "default")] == \
        ["avx2", None, None, None]
    # on AVX2 the convolutions only: oneDNN's packed linear layers lost to MKL's products there
    assert not passes._PACK_RULES["_is_packable_linear"](None, "avx2")
    assert not passes._PACK_RULES["_is_packable_mkldnn_rnn_layer"](None, "avx2")
    assert passes._PACK_RULES["_is_packable_mkldnn_rnn_layer"](None, "avx512")
    monkeypatch.setattr(cpu, "host_features", lambda: frozenset({"sse4_2", "avx"}))  # neither class
    assert passes.onednn_class() is None and passes.packing_class(variant("native")) is None


def test_optimize_folds_the_weights_by_default_keeping_nan_as_eager(tmp_path, monkeypatch):
    from export_tools import cpu, package, passes

    torch.manual_seed(0)
    model = _Activations().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 4, 12, 12)
    odd = x.clone()
    odd[0, 0, 4, 4], odd[0, 1, 9, 9], odd[0, 2, 1, 1] = float("nan"), float("inf"), -float("inf")
    libraries = {}
    for optimize in ("fold", "none"):
        # fold: the default; two variants from one process (inductor registers its packing once per process)
        kwargs = {"cpu_isa": "native,avx2"} if optimize == "fold" else {"optimize": optimize}
        path = export_package(model, (x,), tmp_path / f"{optimize}.pt2", golden=1, **kwargs)  # verified
        with zipfile.ZipFile(path) as z:
            libraries[optimize] = b"".join(z.read(n) for n in z.namelist()
                                           if n.endswith(".wrapper.so") and "/avx2_model/" not in n)
            if optimize == "fold":
                (avx2,) = [z.read(n) for n in z.namelist() if n.endswith(".wrapper.so") and "/avx2_model/" in n]
                assert b"_convolution_pointwise" not in avx2 and b"_linear_pointwise" not in avx2
                assert b"aoti_torch_cpu_convolution" in avx2
        # non-finite values travel as in eager: oneDNN's fused ReLU and clamps would make NaN 0 (passes.KeepNonFinite)
        with torch.no_grad():
            got, expected = load_package(path)(odd), model(odd)
        assert torch.equal(got.isnan(), expected.isnan()) and expected.isnan().sum() > 1000
        assert torch.allclose(got, expected, atol=1e-5, equal_nan=True)
    # fold: the weights compiled in as constants (the batch norms folded); the five 3x3 convolutions packed for
    # oneDNN on an AVX2 or AVX-512 machine (one with the residual add), the grouped one ATen's, the depthwise one
    # pt2rt's kernel (the linear layer on AVX-512 only: on AVX2 oneDNN's packed products lost to MKL's)
    native = cpu.Variant(name="native", arch=cpu.host_arch(), vec_isa="", flags=(), cpu_features=())
    packed_for = passes.packing_class(native)
    assert b"_frozen_param" in libraries["fold"] and b"aoti_torch_cpu_convolution" in libraries["fold"]
    assert (b"mkldnn__convolution_pointwise" in libraries["fold"]) == (packed_for is not None)
    assert (b"aoti_torch_cpu__linear_pointwise" in libraries["fold"]) == (packed_for == "avx512")
    # the spec names the class the native variant's weights are packed for; the runtimes pass it over elsewhere
    spec = read_spec(tmp_path / "fold.pt2")
    assert [v.get("packed_for") for v in spec["variants"]] == [packed_for, None]
    # the linear layer (288 rows of 12 features): pt2rt's kernel where oneDNN does not pack it (export_tools.linear)
    assert sorted(op["name"] for op in spec["custom_ops"]) == sorted(
        ["pt2rt::depthwise_conv2d_act", "pt2rt::lstm_layer", "pt2rt::pointwise_conv2d"] +
        (["pt2rt::linear"] if packed_for != "avx512" else []))
    if packed_for is not None:
        assert package.select_variant(spec)["isa"] == "native"
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
        assert package.select_variant(spec)["isa"] == "avx2"
        with pytest.raises(ExportError, match=f"CPU variant native has weights packed for oneDNN's {packed_for} "
                                              f"code, and oneDNN runs its baseline code here"):
            package.select_variant(spec, "native")
    assert b"addmm" not in libraries["fold"]
    assert b"_frozen_param" not in libraries["none"] and b"_convolution_pointwise" not in libraries["none"]
    with pytest.raises(ExportError, match="expected optimize as one of fold, none, got 'fast'"):
        export_package(model, (x,), tmp_path / "bad.pt2", optimize="fast")


def test_inputs_that_index_a_table_get_its_range_and_only_those():
    """spec inputs[i].values: an input every element of which indexes a table (through views and widening
    conversions); not one a slice of which does (its other columns hold other things), nor one narrowed first."""
    from export_tools.export import _value_ranges

    class Tables(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.big, self.small = torch.nn.Embedding(10000, 4), torch.nn.Embedding(7, 4)
            self.rows = torch.nn.Parameter(torch.randn(30, 4))

        def forward(self, pairs, ids, picks, wrapped):
            return (self.big(pairs[:, 0]) + self.small(pairs[:, 1]) + self.small(ids.to(torch.int64)).sum(1)
                    + self.rows.index_select(0, picks.view(-1)).sum(0) + self.big(wrapped.to(torch.int8).long()))

    ep = torch.export.export(Tables(), (torch.tensor([[1, 2]]), torch.tensor([[3, 4]], dtype=torch.int32),
                                        torch.tensor([[5]]), torch.tensor([6])))
    assert _value_ranges(ep) == {"ids": {"min": 0, "max": 6, "indexes": "aten.embedding of 7 rows"},
                                 "picks": {"min": 0, "max": 29, "indexes": "aten.index_select of 30 rows"}}
