"""export --lite: variants that run without libtorch (export_tools.lite, runtime/lite's shim).

One package compiled for the module (its export checks the lite variant on the golden cases already); the runner
then takes it through inputs the export never saw, in this process - where libtorch is loaded too."""

import re
import subprocess
from pathlib import Path

import pytest
import torch

from export_tools import export_package, read_spec
from export_tools import lite
from export_tools.errors import ExportError
from my_ops import models

ROOT = Path(__file__).resolve().parents[2]


class Tagger(torch.nn.Module):
    """Convolutions of every kind lite's shim runs (dense, strided, grouped, depthwise, pointwise with its batch norm
    and activation, 3x3 by Winograd's, 1-d; channels-last and contiguous), products (linear: ATen's and pt2rt's
    kernel; batched), attention
    (causal, with a mask, and plain: pt2rt's kernel), and what inductor generates itself (norms, GELU's erf from Sleef, softmax)."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.pointwise = torch.nn.Conv2d(16, 20, 1)  # 20 channels: a tile's partial vector
        self.pointwise_bn = torch.nn.BatchNorm2d(20)
        self.squeeze = torch.nn.Conv2d(20, 16, 1, bias=False)
        self.depthwise = torch.nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=16)
        self.dense = torch.nn.Conv2d(16, 16, 3, padding=1)  # channels-last, 16 channels: read in place
        self.widen = torch.nn.Conv2d(16, 80, 1)
        self.winograd = torch.nn.Conv2d(40, 36, 3, padding=1)  # pt2rt's Winograd kernel; 36 out: a partial vector
        self.narrow = torch.nn.Conv2d(36, 16, 1, bias=False)
        # padding wider than the dilated kernel: the outer outputs see no input at all (bias alone)
        self.wide = torch.nn.Conv2d(16, 16, 3, padding=5, dilation=2, groups=16)
        self.grouped = torch.nn.Conv2d(16, 24, 3, groups=4, bias=False)
        self.conv1d = torch.nn.Conv1d(24, 64, 5, padding=2)  # 64 channels: every kernel width's full blocks
        self.norm = torch.nn.LayerNorm(64)
        self.proj = torch.nn.Linear(64, 64)
        self.head = torch.nn.Linear(64, 5)

    def forward(self, x):
        y = torch.nn.functional.hardswish(self.pointwise_bn(self.pointwise(torch.relu(self.stem(x)))))
        y = self.squeeze(y)
        y = torch.nn.functional.gelu(self.depthwise(y)) + y
        y = torch.relu(self.dense(y.contiguous(memory_format=torch.channels_last))) + y
        wide, other = self.widen(y).chunk(2, 1)  # a view of half the channels: the kernel must not read the others
        y = self.narrow(torch.relu(self.winograd(wide))) + y + other[:, :16]
        y = y + 0.01 * torch.nn.functional.silu(self.wide(y)).sum((2, 3), keepdim=True)  # silu: the kernel's
        y = self.grouped(y).flatten(2)                       # [n, 24, h*w]
        y = self.conv1d(y).transpose(1, 2)                   # [n, h*w, 64]
        y = self.norm(y)
        n, p, _ = y.shape
        attn = torch.softmax(y @ self.proj(y).transpose(1, 2) / 64 ** 0.5, dim=-1)
        heads = self.proj(y).view(n, p, 8, 8).transpose(1, 2)            # [n, 8, p, 8]
        causal = torch.nn.functional.scaled_dot_product_attention(heads, heads, heads, is_causal=True)
        bias = torch.linspace(-1, 1, p * p).view(p, p)
        masked = torch.nn.functional.scaled_dot_product_attention(heads, heads.flip(2), heads, attn_mask=bias)
        plain = torch.nn.functional.scaled_dot_product_attention(heads, heads.flip(2), heads.flip(1))  # pt2rt's
        z = (causal + masked + plain).transpose(1, 2).reshape(n, p, 64)
        z = z + 0.1 * (y @ self.proj.weight)  # proj's weight also outside a linear layer: proj stays ATen's (addmm)
        # head: pt2rt's linear kernel (5 of a panel's 16 columns) on a transposed view, whose rows lite gathers
        return self.head((attn @ y + z).transpose(0, 1)).mean(0), y.amax(1)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    if lite.find_runtime() is None:
        pytest.fail(f"{lite.LIBRARY_NAME} is not built (make build); set {lite.ENV_VAR} to its path")
    torch.manual_seed(0)
    model = Tagger().eval()
    path = tmp_path_factory.mktemp("lite") / "tagger.pt2"
    export_package(model, (torch.randn(2, 3, 20, 20),), path, dynamic_batch=(1, 4), lite=True)
    return path, model


def _library(path: Path, variant: dict) -> bytes:
    import zipfile

    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/" + variant["record"]))
        return z.read(name)


def test_lite_variant_matches_eager_on_inputs_the_export_never_saw(package):
    path, model = package
    spec = read_spec(path)
    (variant,) = spec["lite_variants"]
    runner = lite.Runner(_library(path, variant), lite.find_runtime())
    try:
        for batch in (1, 3, 4):
            x = torch.randn(batch, 3, 20, 20) * 3
            with torch.no_grad():
                expected = model(x)
            actual = runner(x)
            assert len(actual) == 2
            for a, e in zip(actual, expected):
                assert a.shape == e.shape
                torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
            # NaN where eager has it: an input NaN reaches every output through the softmax
            x[0, 0, 0, 0] = float("nan")
            with torch.no_grad():
                expected = model(x)
            for a, e in zip(runner(x), expected):
                assert torch.equal(a.isnan(), e.isnan())
    finally:
        runner.close()


def test_lite_library_needs_no_libtorch(package):
    path, _ = package
    spec = read_spec(path)
    (variant,) = spec["lite_variants"]
    assert variant["record"] == "pt2rt/lite/native.so" and variant["isa"] == "native"
    assert set(variant["shim"]) <= lite.SHIM_FUNCTIONS
    assert {"aoti_torch_cpu_convolution", "aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu",
            "aoti_torch_cpu_addmm_out", "aoti_torch_cpu_pointwise_conv2d", "aoti_torch_cpu_depthwise_conv2d",
            "aoti_torch_cpu_depthwise_conv2d_act", "aoti_torch_cpu_winograd_conv2d",
            "aoti_torch_cpu_attention", "aoti_torch_cpu_linear"} <= set(variant["shim"])
    assert not [n for n in variant["needed"] if re.search(r"torch|c10|python", n)]
    # the full variants are as they were: the package still runs in the full runtime
    assert [v["isa"] for v in spec["variants"]] == ["native"]


def test_lite_shim_names_are_the_headers():
    header = (ROOT / "runtime" / "lite" / "shim.h").read_text()
    declared = set(re.findall(r"\bpt2rt_lite_(aoti_torch_\w+)\(", header))
    assert declared == lite.SHIM_FUNCTIONS
    # the list a static link keeps
    assert set(re.findall(r"\bX\((aoti_torch_\w+)\)", header)) == lite.SHIM_FUNCTIONS


def test_lite_shim_declarations_agree_with_torchs(tmp_path):
    """torch's own declarations, renamed as a lite library is built, and runtime/lite/shim.h in one translation
    unit: a parameter or return type that differs is a conflicting declaration of a C function."""
    include = Path(torch.__file__).parent / "include"
    (tmp_path / "names.h").write_text(lite.rename_header(include))
    source = tmp_path / "check.cpp"
    source.write_text('#include "names.h"\n'
                      "#include <torch/csrc/inductor/aoti_torch/c/shim.h>\n"
                      "#include <torch/csrc/inductor/aoti_torch/generated/c_shim_cpu.h>\n"
                      f'#include "{ROOT / "runtime" / "lite" / "shim.h"}"\n')
    result = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-I", str(include), str(source)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[:2000]


def test_torchbind_class_is_refused_by_name_before_any_compile(tmp_path):
    model, inputs = models.identity_conv_net()
    with pytest.raises(lite.LiteError, match=r"lite cannot run TorchBind objects: the model uses "
                                             r"my_ops::IdentityConvClass"):
        export_package(model, inputs, tmp_path / "m.pt2", lite=True)
    assert list(tmp_path.iterdir()) == []


def test_a_model_that_changes_its_buffers_is_refused_by_name(tmp_path):
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(1))

        def forward(self, x):
            self.calls.add_(1)
            return x * self.calls

    with pytest.raises(lite.LiteError, match=r"lite cannot run a model that changes its buffers as it runs: it "
                                             r"changes calls"):
        export_package(Counter(), (torch.randn(3),), tmp_path / "m.pt2", lite=True)


@pytest.fixture(scope="module")
def op_package(exported):
    """The example net with my_ops::identity_conv_op (and an aten depthwise convolution in place of its TorchBind
    object), exported with lite: the op runs from libidentity_conv_ops_lite.so."""
    path, model, _ = exported("lite/net_dynamic")
    return path, model


def test_custom_op_runs_in_lite_from_its_ops_librarys_lite_build(op_package, tmp_path):
    path, model = op_package
    ops = {op["name"]: op for op in read_spec(path)["custom_ops"]}
    # the depthwise convolution is pt2rt's kernel (export_tools.convolutions), which lite runs itself
    assert sorted(ops) == ["my_ops::identity_conv_op", "pt2rt::depthwise_conv2d"]
    op = ops["my_ops::identity_conv_op"]
    assert op["lite_library"] == "libidentity_conv_ops_lite.so" and "lite_library" not in ops["pt2rt::depthwise_conv2d"]
    # inputs the export never saw, channels-last among them (the op is given what the convolution leaves)
    x = torch.randn(5, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    torch.save(x, tmp_path / "x.pt")
    env = dict(__import__("os").environ, LD_DEBUG="libs")
    result = subprocess.run([str(_pt2run_lite()), "run", str(path), "--input", str(tmp_path / "x.pt"), "--output",
                             str(tmp_path / "y.pt")], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = _loaded_libraries(result.stderr)
    assert "libidentity_conv_ops_lite.so" in loaded
    assert not [n for n in loaded if re.search(r"torch|c10|python", n)], loaded
    with torch.no_grad():
        expected = models.identity_conv_net()[0](x)  # the model with the TorchBind object, in eager
    torch.testing.assert_close(torch.load(tmp_path / "y.pt"), expected, rtol=1e-4, atol=1e-4)
    info = subprocess.run([str(_pt2run_lite()), "info", str(path)], capture_output=True, text=True).stdout
    assert "my_ops::identity_conv_op  <- libidentity_conv_ops.so, lite: libidentity_conv_ops_lite.so" in info


def test_lite_refuses_a_full_ops_library_given_for_a_lite_one(op_package):
    """The full library would bring libtorch into the lite process: one the package does not name is refused."""
    path, _ = op_package
    (op,) = [op for op in read_spec(path)["custom_ops"] if op["name"] == "my_ops::identity_conv_op"]
    given = lite.find_runtime().resolve().parent / op["library"]
    result = subprocess.run([str(_pt2run_lite()), "verify", str(path), "--ops", str(given)], capture_output=True,
                            text=True)
    assert result.returncode == 4, result.stderr
    assert (f"ops library {given} is not one the package's lite variants use (libidentity_conv_ops_lite.so)"
            in result.stderr)


def test_lite_entry_keeps_the_layout_and_its_failure_fails_the_run_with_its_message(tmp_path):
    """The entry's output is laid out as the fake says (empty_like: channels-last stays channels-last), which the
    generated code indexes by; the op's own check (a floating dtype) fails the run with the entry's message."""
    class Flat(torch.nn.Module):
        def forward(self, x):
            y = torch.ops.my_ops.identity_conv_op(x.contiguous(memory_format=torch.channels_last))
            return y.flatten(1) * 2, torch.ops.my_ops.identity_conv_op(x).sum()  # the second sees the input itself

    model = Flat()
    path = export_package(model, (torch.randn(1, 2, 3, 4),), tmp_path / "flat.pt2", lite=True, cpu_isa="default")
    library = _library(path, read_spec(path)["lite_variants"][0])
    runner = lite.Runner(library, lite.find_runtime(),
                         (lite.find_runtime().resolve().parent / "libidentity_conv_ops_lite.so",))
    try:
        x = torch.randn(1, 2, 3, 4)
        for got, expected in zip(runner(x), model(x)):
            torch.testing.assert_close(got, expected)
        with pytest.raises(lite.LiteError, match=r"identity_conv_op: expected dtype float32, float64, float16 or "
                                                 r"bfloat16, got int64"):
            runner(torch.ones(1, 2, 3, 4, dtype=torch.int64))
    finally:
        runner.close()


STALE_ENTRY = r"""
#include <pt2rt/lite_op.h>
PT2RT_LITE_OP_SCHEMA(my_ops, identity_conv_op, SCHEMA);
PT2RT_LITE_OP(my_ops, identity_conv_op)(AtenTensorHandle x, AtenTensorHandle* ret0) {
  return pt2rt::lite_op::guarded("identity_conv_op", [&] {
    const pt2rt::lite_op::TensorRef in(x);
    auto out = pt2rt::lite_op::Tensor::empty_like(in);
    pt2rt::lite_op::parallel_for(0, in.numel(), 1, [&](int64_t b, int64_t) {
      if (b > 0) throw std::runtime_error("a part past the first failed");
    });
    *ret0 = out.release();
  });
}
"""


@pytest.mark.parametrize("case", ["stale", "throws"])
def test_lite_refuses_a_stale_entry_and_reports_what_a_parallel_part_throws(op_package, tmp_path, case):
    """A lite build whose entry was written for another schema is refused before anything runs (exit 4); what a
    parallel_for body throws on a worker thread fails the run with its message (exit 7), not the process."""
    path, _ = op_package
    schema = ('"my_ops::identity_conv_op(Tensor x, int k) -> Tensor"' if case == "stale" else
              '"my_ops::identity_conv_op(Tensor x) -> Tensor"')
    (tmp_path / "entry.cpp").write_text(STALE_ENTRY)
    library = tmp_path / "libidentity_conv_ops_lite.so"
    subprocess.run(["c++", "-std=c++17", "-shared", "-fPIC", f"-DSCHEMA={schema}", f"-I{ROOT / 'runtime' / 'include'}",
                    str(tmp_path / "entry.cpp"), "-o", str(library)], check=True)
    x = torch.randn(2, 3, 32, 32)
    torch.save(x, tmp_path / "x.pt")
    result = subprocess.run([str(_pt2run_lite()), "run", str(path), "--ops", str(library), "--input",
                             str(tmp_path / "x.pt"), "--output", str(tmp_path / "y.pt")],
                            capture_output=True, text=True, env=dict(__import__("os").environ, OMP_NUM_THREADS="2"))
    if case == "stale":
        assert result.returncode == 4, result.stderr
        assert ("entry for my_ops::identity_conv_op was written for 'my_ops::identity_conv_op(Tensor x, int k) -> "
                "Tensor', the package was exported against 'my_ops::identity_conv_op(Tensor x) -> Tensor'"
                in result.stderr)
    else:
        assert result.returncode == 7, result.stderr
        assert "identity_conv_op: a part past the first failed" in result.stderr


def test_custom_op_without_a_lite_build_is_refused_by_name(tmp_path):
    from export_tools import load_ops_library

    probe = lite.find_runtime().resolve().parent / "libpt2rt_probe_ops.so"
    load_ops_library(probe)
    torch.library.register_fake("pt2rt_probe::hold", lambda x, micros: torch.empty_like(x), allow_override=True)

    class Probe(torch.nn.Module):
        def forward(self, x):
            return torch.ops.pt2rt_probe.hold(x, 1)

    with pytest.raises(lite.LiteError, match=r"lite has no kernel for the custom op pt2rt_probe::hold: its ops "
                                             r"library's lite build libpt2rt_probe_ops_lite.so is not next to "):
        export_package(Probe(), (torch.randn(2, 3),), tmp_path / "m.pt2", lite=True)
    assert list(tmp_path.iterdir()) == []


def test_c_declarations_follow_the_schema():
    lib = torch.library.Library("pt2rt_lite_decl", "FRAGMENT")
    lib.define("every(Tensor x, Tensor? w, Tensor[] xs, int k, SymInt? m, int[] s, float a, float? b, bool f, "
               "str mode) -> (Tensor, Tensor)")
    lib.define("writes(Tensor(a!) x) -> Tensor")
    lib.define("dtyped(Tensor x, ScalarType t) -> Tensor")
    lib.define("counts(Tensor x) -> int")
    ops = torch.ops.pt2rt_lite_decl
    assert lite.c_declaration(ops.every.default) == (
        "AOTITorchError aoti_torch_cpu_every(AtenTensorHandle x_, AtenTensorHandle* w_, const AtenTensorHandle* xs_, "
        "int64_t xs__len_, int64_t k_, int64_t* m_, const int64_t* s_, int64_t s__len_, double a_, double* b_, "
        "int32_t f_, const char* mode_, AtenTensorHandle* ret0, AtenTensorHandle* ret1)")
    assert lite.op_symbol("acme::scale2") == "pt2rt_op_acme_scale2"
    with pytest.raises(lite.LiteError, match=r"pt2rt_lite_decl::writes: it writes its argument x"):
        lite.c_declaration(ops.writes.default)
    with pytest.raises(lite.LiteError, match=r"its argument t of type ScalarType"):
        lite.c_declaration(ops.dtyped.default)
    with pytest.raises(lite.LiteError, match=r"pt2rt_lite_decl::counts: it returns a int"):
        lite.c_declaration(ops.counts.default)


def test_op_without_a_lite_kernel_is_refused_by_name(tmp_path):
    class TopK(torch.nn.Module):
        def forward(self, x):
            return torch.topk(x, 3).values

    with pytest.raises(lite.LiteError, match=r"lite has no kernel for aten\.topk \(the model library calls "
                                             r"aoti_torch_cpu_topk"):
        export_package(TopK(), (torch.randn(4, 16),), tmp_path / "m.pt2", lite=True)
    assert list(tmp_path.iterdir()) == []


def test_lite_is_a_cpu_flag(tmp_path):
    with pytest.raises(ExportError, match="expected lite as True or False"):
        export_package(torch.nn.ReLU(), (torch.randn(2),), tmp_path / "m.pt2", lite="yes")


def _pt2run_lite() -> Path:
    """pt2run on the lite library: next to the lite library under test (<build>/lib -> <build>/bin)."""
    path = lite.find_runtime().resolve().parent.parent / "bin" / "pt2run_lite"
    assert path.is_file(), f"{path} is not built (make build)"
    return path


def _loaded_libraries(stderr: str) -> set[str]:
    # LD_DEBUG=libs: "calling init: /path/lib.so" for every library the process initialised
    return {Path(m).name for m in re.findall(r"calling init: (\S+)", stderr)}


def test_pt2run_lite_verifies_and_runs_the_package_with_no_libtorch_loaded(package, tmp_path):
    path, model = package
    env = dict(__import__("os").environ, LD_DEBUG="libs")
    result = subprocess.run([str(_pt2run_lite()), "verify", str(path)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "verified: 4 of 4 golden cases passed" in result.stdout and "(CPU variant native)" in result.stdout
    loaded = _loaded_libraries(result.stderr)
    assert "libpt2rt_lite.so" in loaded and any(n.startswith("libsleef") for n in loaded)
    assert not [n for n in loaded if re.search(r"torch|c10|python", n)], loaded
    # run: a tensor file in, a tensor file out, both in torch.save's format
    x = torch.randn(3, 3, 20, 20)
    torch.save(x, tmp_path / "x.pt")
    result = subprocess.run([str(_pt2run_lite()), "run", str(path), "--input", str(tmp_path / "x.pt"),
                             "--output", str(tmp_path / "y.pt")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    got = torch.load(tmp_path / "y.pt")
    with torch.no_grad():
        expected = model(x)
    for a, e in zip(got, expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)
    info = subprocess.run([str(_pt2run_lite()), "info", str(path)], capture_output=True, text=True).stdout
    assert "lite variant native  (selected here)" in info


def test_pt2run_lite_runs_each_run_on_the_intra_op_threads_asked_for(package):
    """--intra-op-threads (Options::intra_op_threads): each run's OpenMP team has that many threads. The threads a
    bench process ends with are its callers' teams; one caller with 4 threads has 3 more than with 1."""
    import json
    path, _ = package
    threads = {}
    for n in (1, 4):
        result = subprocess.run([str(_pt2run_lite()), "bench", str(path), "--threads", "1", "--warmup", "1",
                                 "--iters", "3", "--intra-op-threads", str(n), "--json"], capture_output=True,
                                text=True)
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["intra_op_threads"] == n
        threads[n] = report["process_threads"]
    assert threads[4] - threads[1] == 3, threads
    result = subprocess.run([str(_pt2run_lite()), "verify", str(path), "--intra-op-threads", "2"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "4 of 4 golden cases passed" in result.stdout, result.stderr


def test_pt2run_lite_refuses_a_package_without_lite_variants(exported):
    path, _, _ = exported("net_dynamic")
    result = subprocess.run([str(_pt2run_lite()), "verify", str(path)], capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert "has no lite variants: export it with --lite" in result.stderr


def test_c_api_of_the_lite_library_runs_beside_libtorch(package):
    """The lite library's C API called in this process, where libtorch is loaded: nothing of the two collides."""
    import ctypes

    path, model = package
    lib = ctypes.CDLL(str(lite.find_runtime()))
    lib.pt2rt_last_error.restype = ctypes.c_char_p
    lib.pt2rt_load.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                               ctypes.POINTER(ctypes.c_void_p)]

    class View(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.POINTER(ctypes.c_int64)), ("ndim", ctypes.c_size_t),
                    ("dtype", ctypes.c_int)]

    lib.pt2rt_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(View), ctypes.c_size_t,
                              ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    lib.pt2rt_tensor_data.restype = ctypes.c_void_p
    lib.pt2rt_tensor_data.argtypes = [ctypes.c_void_p]
    lib.pt2rt_tensor_ndim.argtypes = [ctypes.c_void_p]
    lib.pt2rt_tensor_ndim.restype = ctypes.c_size_t
    lib.pt2rt_tensor_shape.argtypes = [ctypes.c_void_p]
    lib.pt2rt_tensor_shape.restype = ctypes.POINTER(ctypes.c_int64)
    lib.pt2rt_tensor_free.argtypes = [ctypes.c_void_p]
    lib.pt2rt_runtime_free.argtypes = [ctypes.c_void_p]
    rt = ctypes.c_void_p()
    assert lib.pt2rt_load(str(path).encode(), None, 0, 2, ctypes.byref(rt)) == 0, lib.pt2rt_last_error()
    try:
        x = torch.randn(2, 3, 20, 20)
        shape = (ctypes.c_int64 * 4)(*x.shape)
        view = View(x.data_ptr(), shape, 4, 0)
        outputs = (ctypes.c_void_p * 2)()
        n = ctypes.c_size_t()
        assert lib.pt2rt_run(rt, ctypes.byref(view), 1, outputs, 2, ctypes.byref(n)) == 0, lib.pt2rt_last_error()
        assert n.value == 2
        with torch.no_grad():
            expected = model(x)
        for i, e in enumerate(expected):
            got_shape = [lib.pt2rt_tensor_shape(outputs[i])[d] for d in range(lib.pt2rt_tensor_ndim(outputs[i]))]
            assert got_shape == list(e.shape)
            data = ctypes.string_at(lib.pt2rt_tensor_data(outputs[i]), e.numel() * 4)
            got = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(e.shape)
            torch.testing.assert_close(got, e, rtol=1e-4, atol=1e-4)
            lib.pt2rt_tensor_free(outputs[i])
        # a bad input is refused with the C API's status and message, as the full runtime's
        bad = View(x.data_ptr(), shape, 3, 0)
        assert lib.pt2rt_run(rt, ctypes.byref(bad), 1, outputs, 2, ctypes.byref(n)) == 5
        assert b"expected 4 dims" in lib.pt2rt_last_error()
    finally:
        lib.pt2rt_runtime_free(rt)


def _bad_file(tmp_path, name: str, payload: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(payload)
    return path


def _torch_save_bytes(obj) -> bytes:
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _with_pickle(saved: bytes, pickle: bytes) -> bytes:
    """A torch.save archive with its data.pkl replaced (same record names, stored)."""
    import io
    import zipfile

    src = zipfile.ZipFile(io.BytesIO(saved))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        for name in src.namelist():
            z.writestr(name, pickle if name.endswith("data.pkl") else src.read(name))
    return out.getvalue()


def _deep_pickle(levels: int) -> bytes:
    """Lists nested `levels` deep through the memo: each new list gets the previous one by LONG_BINGET."""
    out = b"\x80\x02]r\x01\x00\x00\x00"
    for k in range(2, levels + 1):
        out += b"]r" + k.to_bytes(4, "little") + b"j" + (k - 1).to_bytes(4, "little") + b"a"
    return out + b"."


@pytest.mark.parametrize("case", ["global", "huge", "truncated", "compressed", "not_zip", "cycle", "deep"])
def test_pt2run_lite_refuses_hostile_tensor_files_with_exit_6(package, tmp_path, case):
    """Tensor files are read by lite's own zip and pickle readers: bad ones get one line and exit 6 (I/O)."""
    import io
    import zipfile

    path, _ = package
    good = _torch_save_bytes(torch.randn(2, 3, 20, 20))
    if case == "global":  # a pickle that would call os.system
        payload, message = _with_pickle(good, b"cos\nsystem\n(X\x04\x00\x00\x00truetR."), "calls os.system"
    elif case == "huge":  # a 4-byte storage seen as 2^40 floats through stride 0
        one = _torch_save_bytes(torch.randn(1))
        src = zipfile.ZipFile(io.BytesIO(one))
        data_pkl = src.read(next(n for n in src.namelist() if n.endswith("data.pkl")))
        sizes = b"QK\x00K\x01\x85q\x06K\x01\x85"  # offset 0, size (1,), stride (1,)
        assert data_pkl.count(sizes) == 1
        huge = data_pkl.replace(sizes, b"QK\x00\x8a\x06\x00\x00\x00\x00\x00\x01\x85q\x06K\x00\x85")
        payload, message = _with_pickle(one, huge), "at most"
    elif case == "truncated":
        payload, message = good[: len(good) // 2], "not a tensor file written by torch.save"
    elif case == "compressed":
        out = io.BytesIO()
        src = zipfile.ZipFile(io.BytesIO(good))
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for name in src.namelist():
                z.writestr(name, src.read(name))
        payload, message = out.getvalue(), "is compressed (method 8)"
    elif case == "cycle":  # a list appended to itself through the memo
        payload, message = _with_pickle(good, b"\x80\x02]q\x00h\x00a."), "a container inside itself"
    elif case == "deep":  # nesting the stack-depth bound would miss, built through memo recalls
        payload, message = _with_pickle(good, _deep_pickle(5000)), "nested deeper than 256"
    else:
        payload, message = b"not a zip at all" * 10, "not a tensor file written by torch.save"
    bad = _bad_file(tmp_path, "x.pt", payload)
    result = subprocess.run([str(_pt2run_lite()), "run", str(path), "--input", str(bad), "--output",
                             str(tmp_path / "y.pt")], capture_output=True, text=True)
    assert result.returncode == 6, (result.returncode, result.stderr)
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "y.pt").exists()


def test_pt2run_lite_refuses_a_damaged_package_with_exit_3(package, tmp_path):
    path, _ = package
    data = path.read_bytes()
    for name, payload in {"truncated.pt2": data[: len(data) // 3], "empty.pt2": b""}.items():
        bad = _bad_file(tmp_path, name, payload)
        result = subprocess.run([str(_pt2run_lite()), "verify", str(bad)], capture_output=True, text=True)
        assert result.returncode == 3, (name, result.stderr)
        assert str(bad) in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


CONSUMER_CMAKE = """cmake_minimum_required(VERSION 3.25)
project(consumer CXX)
find_package(pt2rt REQUIRED)
add_executable(verify_shared main.cpp)
target_link_libraries(verify_shared PRIVATE pt2rt::pt2rt)
add_executable(verify_static main.cpp)
target_link_libraries(verify_static PRIVATE pt2rt::pt2rt_static)
"""
CONSUMER_MAIN = """#include <pt2rt/pt2rt.h>
#include <cstdio>
int main(int argc, char** argv) {
  try {
    pt2rt::Runtime rt = pt2rt::Runtime::load(argv[1]);
    const pt2rt::VerifyReport report = rt.verify();
    std::printf("lite %d, variant %s, %zu cases, passed %d\\n", pt2rt::is_lite(), rt.variant().record.c_str(),
                report.cases.size(), report.passed());
    return report.passed() ? 0 : 1;
  } catch (const pt2rt::Error& e) {
    std::fprintf(stderr, "%s\\n", e.what());
    return pt2rt::exit_code(e.code());
  }
}
"""


@pytest.fixture(scope="module")
def dist_lite(tmp_path_factory):
    """make lite into a folder of its own (scripts/lite.sh: it checks the size and the dependencies itself)."""
    tmp = tmp_path_factory.mktemp("dist-lite")
    env = dict(__import__("os").environ, PT2RT_LITE_BUILD_DIR=str(tmp / "build"), PT2RT_LITE_DIST=str(tmp / "dist"))
    result = subprocess.run([str(ROOT / "scripts" / "lite.sh")], capture_output=True, text=True, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return tmp / "dist"


def test_make_lite_bundle_is_small_and_names_no_libtorch(dist_lite):
    files = [p for p in dist_lite.rglob("*") if p.is_file() and not p.is_symlink()]
    assert sum(p.stat().st_size for p in files) <= 10_000_000
    names = {str(p.relative_to(dist_lite)) for p in dist_lite.rglob("*")}
    assert {"bin/pt2run", "lib/libpt2rt.so", "lib/libpt2rt.a", "lib/libsleef.so.3", "include/pt2rt/pt2rt.h",
            "include/pt2rt/pt2rt_c.h", "include/pt2rt/lite_op.h", "lib/cmake/pt2rt/pt2rtConfig.cmake",
            "lib/cmake/pt2rt/pt2rtOpsLibrary.cmake", "lib/libidentity_conv_ops_lite.so"} <= names
    for p in files:
        if p.suffix in (".so", ".3") or ".so." in p.name or p.parent.name == "bin":
            dynamic = subprocess.run(["readelf", "-d", str(p)], capture_output=True, text=True).stdout
            assert not re.search(r"NEEDED.*(torch|c10|python)", dynamic), (p, dynamic)
    # only pt2rt's names leave the shared library
    symbols = subprocess.run(["nm", "-D", "--defined-only", "-C", str(dist_lite / "lib" / "libpt2rt.so")],
                             capture_output=True, text=True, check=True).stdout.split("\n")
    foreign = [line for line in symbols if line.strip() and not re.search(r" (pt2rt_|pt2rt::|typeinfo|vtable)", line)]
    assert not foreign, foreign[:5]


def test_make_lite_bundle_runs_the_package_from_pt2run_and_from_a_cmake_program(dist_lite, package, tmp_path):
    path, _ = package
    env = dict(__import__("os").environ, LD_DEBUG="libs")
    result = subprocess.run([str(dist_lite / "bin" / "pt2run"), "verify", str(path)], capture_output=True,
                            text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = _loaded_libraries(result.stderr)
    assert "libpt2rt.so.0" in loaded and "libsleef.so.3" in loaded
    assert not [n for n in loaded if re.search(r"torch|c10|python", n)], loaded
    # a program built against the bundle's CMake package, with either library
    (tmp_path / "CMakeLists.txt").write_text(CONSUMER_CMAKE)
    (tmp_path / "main.cpp").write_text(CONSUMER_MAIN)
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(build), "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={dist_lite}"],
                   check=True, capture_output=True)
    made = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout[-2000:]
    for exe in ("verify_shared", "verify_static"):
        run = subprocess.run([str(build / exe), str(path)], capture_output=True, text=True)
        assert run.returncode == 0, (exe, run.stderr)
        assert "lite 1, variant pt2rt/lite/native.so, 4 cases, passed 1" in run.stdout


def _cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text()
    return set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split())


@pytest.mark.parametrize("kernels", ["baseline", "avx2", "avx512"])
def test_each_kernel_instruction_set_verifies_and_matches_eager(package, tmp_path, kernels):
    """The products run in the widest vectors the CPU has; PT2RT_LITE_KERNELS narrows that, so each path is run."""
    needs = {"baseline": set(), "avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512vl", "avx512dq", "avx512bw"}}
    lacking = needs[kernels] - _cpu_flags()
    if lacking:
        pytest.skip(f"this CPU lacks {', '.join(sorted(lacking))} for the {kernels} kernels")
    path, model = package
    env = dict(__import__("os").environ, PT2RT_LITE_KERNELS=kernels)
    result = subprocess.run([str(_pt2run_lite()), "verify", str(path)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    x = torch.randn(4, 3, 20, 20)
    torch.save(x, tmp_path / "x.pt")
    result = subprocess.run([str(_pt2run_lite()), "run", str(path), "--input", str(tmp_path / "x.pt"), "--output",
                             str(tmp_path / "y.pt")], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    with torch.no_grad():
        expected = model(x)
    for a, e in zip(torch.load(tmp_path / "y.pt"), expected):
        torch.testing.assert_close(a, e, rtol=1e-4, atol=1e-4)


def test_outputs_that_view_an_input_are_copies_in_their_own_layout(tmp_path):
    """An output that is a (transposed) view of the caller's input comes back as a contiguous copy the caller owns."""
    class Views(torch.nn.Module):
        def forward(self, x):
            return x.transpose(0, 1), x * 2

    path = export_package(Views(), (torch.randn(3, 5),), tmp_path / "views.pt2", lite=True, golden=2)
    x = torch.randn(3, 5)
    torch.save(x, tmp_path / "x.pt")
    result = subprocess.run([str(_pt2run_lite()), "run", str(path), "--input", str(tmp_path / "x.pt"), "--output",
                             str(tmp_path / "y.pt")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    view, doubled = torch.load(tmp_path / "y.pt")
    assert view.is_contiguous() and torch.equal(view, x.t()) and torch.equal(doubled, x * 2)


class _Recurrent(torch.nn.Module):
    """Token ids, a 2-layer bidirectional GRU, an LSTM and a ReLU RNN (time-major): export_tools.recurrent's
    pt2rt::rnn_layer and pt2rt::lstm_layer, which lite runs itself. The LSTM (one direction, 128 wide, 3 rows) is
    large enough for its steps to split across the intra-op threads."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)
        self.gru = torch.nn.GRU(16, 24, num_layers=2, bidirectional=True, batch_first=True)
        self.lstm = torch.nn.LSTM(48, 128, batch_first=True)
        self.rnn = torch.nn.RNN(128, 8, nonlinearity="relu")
        self.head = torch.nn.Linear(8, 5)

    def forward(self, tokens):
        y, h = self.gru(self.embed(tokens))
        z, (_, c) = self.lstm(y)
        w, _ = self.rnn(z.transpose(0, 1))
        return self.head(w), h, c


def test_recurrent_layers_run_in_lite_equal_to_eager(tmp_path):
    torch.manual_seed(0)
    model = _Recurrent().eval()
    path = export_package(model, (torch.randint(0, 100, (3, 7)),), tmp_path / "recurrent.pt2", lite=True,
                          cpu_isa="default")
    spec = read_spec(path)
    assert {op["name"] for op in spec["custom_ops"]} == {"pt2rt::rnn_layer", "pt2rt::lstm_layer", "pt2rt::linear"}
    for kernels in ("baseline", ""):
        env = dict(__import__("os").environ, PT2RT_LITE_KERNELS=kernels)
        result = subprocess.run([str(_pt2run_lite()), "verify", str(path)], capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        x = torch.randint(0, 100, (3, 7))
        torch.save([x], tmp_path / "x.pt")
        result = subprocess.run([str(_pt2run_lite()), "run", str(path), "--input", str(tmp_path / "x.pt"),
                                 "--output", str(tmp_path / "y.pt")], capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr
        with torch.no_grad():
            expected = model(x)
        for a, e in zip(torch.load(tmp_path / "y.pt"), expected):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
        # the same bits at every thread count: a split step computes each value as one thread does
        outputs = {}
        for threads in (1, 2, 3):
            result = subprocess.run([str(_pt2run_lite()), "run", str(path), "--input", str(tmp_path / "x.pt"),
                                     "--output", str(tmp_path / "y.pt"), "--intra-op-threads", str(threads)],
                                    capture_output=True, text=True, env=env)
            assert result.returncode == 0, result.stderr
            outputs[threads] = torch.load(tmp_path / "y.pt")
        for threads in (2, 3):
            assert all(torch.equal(a, b) for a, b in zip(outputs[threads], outputs[1])), (kernels, threads)
