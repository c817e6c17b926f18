"""Lite variants: model libraries that run without libtorch, in pt2rt-lite (docs/lite.md).

inductor writes the model's C++ with libtorch left out (aot_inductor.link_libtorch off, package_cpp_only); it is
built here with every aoti_torch_* name renamed pt2rt_lite_aoti_torch_* (a forced-include header made from the
torch headers' own names), so that the lite runtime exports only pt2rt_* names and can share a process with
libtorch. The library then needs libgomp, Sleef (libsleef.so.3, Debian's libsleef3) and the lite runtime's shim
functions, nothing else: what else it calls is an op lite has no kernel for, refused here by name. A custom op runs
through its ops library's lite build (lib<name>_lite.so next to lib<name>.so), whose C function
pt2rt_op_<ns>_<op> (PT2RT_LITE_OP, pt2rt/lite_op.h) the generated code calls (aot_inductor.custom_ops_to_c_shims,
declared from the op's schema); TorchBind objects are refused before the compile: lite has no class registry.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ExportError
from .layout import model_dir

PREFIX = "pt2rt_lite_"
RECORD_DIR = "pt2rt/lite/"  # lite libraries, relative to the archive root (outside torch's model folders)
# The shim functions the lite runtime implements (runtime/lite/shim.h declares them; a test holds the two equal).
SHIM_FUNCTIONS = frozenset({
    "aoti_torch_device_type_cpu", "aoti_torch_device_type_cuda", "aoti_torch_layout_strided",
    "aoti_torch_dtype_float32", "aoti_torch_dtype_float64", "aoti_torch_dtype_float16", "aoti_torch_dtype_bfloat16",
    "aoti_torch_dtype_int64", "aoti_torch_dtype_int32", "aoti_torch_dtype_int16", "aoti_torch_dtype_int8",
    "aoti_torch_dtype_uint8", "aoti_torch_dtype_bool",
    "aoti_torch_grad_mode_is_enabled", "aoti_torch_grad_mode_set_enabled",
    "aoti_torch_delete_tensor_object", "aoti_torch_get_data_ptr", "aoti_torch_get_storage_size",
    "aoti_torch_get_dim", "aoti_torch_get_numel", "aoti_torch_get_sizes", "aoti_torch_get_size",
    "aoti_torch_get_strides", "aoti_torch_get_stride", "aoti_torch_get_dtype", "aoti_torch_get_device_type",
    "aoti_torch_get_device_index", "aoti_torch_get_storage_offset", "aoti_torch_is_contiguous",
    "aoti_torch_is_defined", "aoti_torch_new_tensor_handle", "aoti_torch__reinterpret_tensor",
    "aoti_torch_empty_strided", "aoti_torch_create_tensor_from_blob", "aoti_torch_create_tensor_from_blob_v2",
    "aoti_torch_clone", "aoti_torch_clone_preserve_strides", "aoti_torch_copy_", "aoti_torch_check",
    "aoti_torch_cpu_addmm_out", "aoti_torch_cpu_mm_out", "aoti_torch_cpu_bmm_out", "aoti_torch_cpu_convolution",
    "aoti_torch_cpu__scaled_dot_product_flash_attention_for_cpu",
    "aoti_torch_cpu_rnn_layer", "aoti_torch_cpu_lstm_layer", "aoti_torch_cpu_depthwise_conv2d",
    "aoti_torch_cpu_depthwise_conv2d_act", "aoti_torch_cpu_pointwise_conv2d", "aoti_torch_cpu_winograd_conv2d",
    "aoti_torch_cpu_linear",
    "aoti_torch_cpu_attention",
})
# Custom ops the lite runtime runs itself (the recurrent layers export_tools.recurrent makes, runtime/lite/rnn.cpp;
# the depthwise, pointwise and Winograd convolutions of export_tools.convolutions, export_tools.linear's linear
# layers and export_tools.attention's attention, runtime/lite/ops.cpp),
# called by the C function inductor is told to call in their place (aot_inductor.custom_ops_to_c_shims)
BUILTIN_OPS = {
    "pt2rt::rnn_layer": "AOTITorchError aoti_torch_cpu_rnn_layer(AtenTensorHandle gi, AtenTensorHandle h0, "
                        "const AtenTensorHandle* whh_t, int64_t whh_t_len_, const AtenTensorHandle* bhh, "
                        "int64_t bhh_len_, const char* mode, int32_t batch_first, AtenTensorHandle* ret0, "
                        "AtenTensorHandle* ret1)",
    "pt2rt::lstm_layer": "AOTITorchError aoti_torch_cpu_lstm_layer(AtenTensorHandle gi, AtenTensorHandle h0, "
                         "AtenTensorHandle c0, const AtenTensorHandle* whh_t, int64_t whh_t_len_, "
                         "const AtenTensorHandle* bhh, int64_t bhh_len_, int32_t batch_first, "
                         "AtenTensorHandle* ret0, AtenTensorHandle* ret1, AtenTensorHandle* ret2)",
    "pt2rt::depthwise_conv2d": "AOTITorchError aoti_torch_cpu_depthwise_conv2d(AtenTensorHandle x, "
                               "AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride, "
                               "int64_t stride_len_, const int64_t* padding, int64_t padding_len_, "
                               "const int64_t* dilation, int64_t dilation_len_, AtenTensorHandle* ret0)",
    "pt2rt::depthwise_conv2d_act": "AOTITorchError aoti_torch_cpu_depthwise_conv2d_act(AtenTensorHandle x, "
                                   "AtenTensorHandle weight, AtenTensorHandle* bias, const int64_t* stride, "
                                   "int64_t stride_len_, const int64_t* padding, int64_t padding_len_, "
                                   "const int64_t* dilation, int64_t dilation_len_, const char* activation, "
                                   "AtenTensorHandle* ret0)",
    "pt2rt::pointwise_conv2d": "AOTITorchError aoti_torch_cpu_pointwise_conv2d(AtenTensorHandle x, "
                               "AtenTensorHandle weight, AtenTensorHandle* bias, int64_t out_channels, "
                               "const char* activation, AtenTensorHandle* ret0)",
    "pt2rt::linear": "AOTITorchError aoti_torch_cpu_linear(AtenTensorHandle x, AtenTensorHandle weight, "
                     "AtenTensorHandle* bias, int64_t out_features, const char* activation, AtenTensorHandle* ret0)",
    "pt2rt::winograd_conv2d": "AOTITorchError aoti_torch_cpu_winograd_conv2d(AtenTensorHandle x, "
                              "AtenTensorHandle weight, AtenTensorHandle taps, AtenTensorHandle* bias, "
                              "int64_t out_channels, const int64_t* padding, int64_t padding_len_, "
                              "const char* activation, AtenTensorHandle* ret0)",
    "pt2rt::attention": "AOTITorchError aoti_torch_cpu_attention(AtenTensorHandle q, AtenTensorHandle k, "
                        "AtenTensorHandle v, double scale, AtenTensorHandle* ret0)",
}
# What a lite library may need besides the shim (DT_NEEDED); the lite bundle ships Sleef.
LIBRARIES = ("libgomp.so.1", "libsleef.so.3", "libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6",
             "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1")
# inductor settings of a lite compile, on top of the CPU variant's: no libtorch, the C++ only (built here), and no
# oneDNN packed weights (mkldnn ops are libtorch's)
INDUCTOR_CONFIG = {"aot_inductor.link_libtorch": False, "aot_inductor.package_cpp_only": True,
                   "aot_inductor.precompile_headers": False, "cpp.weight_prepack": False}


class LiteError(ExportError):
    """The model needs something the lite runtime does not have (named), or its lite library cannot be built."""


@dataclass(frozen=True)
class Library:
    data: bytes
    shim: tuple[str, ...]       # the shim functions it calls (unprefixed)
    needed: tuple[str, ...]     # its DT_NEEDED libraries


@dataclass(frozen=True)
class CustomOp:
    """A custom op a lite variant calls in its ops library's lite build."""
    name: str           # "my_ops::identity_conv_op"
    symbol: str         # the C function: pt2rt_op_my_ops_identity_conv_op
    declaration: str    # as inductor declares it (aoti_torch_cpu_<op>, renamed to symbol)
    library: Path       # the lite ops library (lib<name>_lite.so) this machine checks it with
    overload: Any = None  # the OpOverload


def refuse_unrunnable(custom: dict[str, Any], ep=None) -> dict[str, CustomOp]:
    """Refuses, by name, what lite cannot run at all: TorchBind classes, custom ops without a lite build of their ops
    library (or one lacking the op's entry, or with arguments lite cannot pass), and buffers the model changes as it
    runs (lite keeps each constant's packed form for the model's life). Returns the custom ops lite runs through
    their ops libraries' lite builds, by name."""
    from . import libraries

    mutated = _mutated_state(ep) if ep is not None else []
    if mutated:
        raise LiteError(f"lite cannot run a model that changes its buffers as it runs: it changes {mutated[0]}")
    if custom["classes"]:
        name = next(iter(custom["classes"]))
        raise LiteError(f"lite cannot run TorchBind objects: the model uses {name} (lite has no class registry); "
                        f"export without lite, or keep the object's work in an op")
    found: dict[str, CustomOp] = {}
    for op in custom["ops"].values():
        name = op._schema.name
        if name in BUILTIN_OPS:
            continue
        if op._schema.overload_name:
            raise LiteError(f"lite calls custom ops by name: {name}.{op._schema.overload_name} is an overload "
                            f"(give the op a name of its own)")
        full = libraries.provider_of(op.namespace)
        library = lite_library_of(full)
        if not library.is_file():
            raise LiteError(f"lite has no kernel for the custom op {name}: its ops library's lite build {library.name} "
                            f"is not next to {full} (docs/lite.md, \"Your own ops\"); export without lite")
        symbol = op_symbol(name)
        defined = _defined(library)
        short_name = name.split("::")[1]
        if symbol not in defined:
            raise LiteError(f"{library} has no lite entry for {name}: it defines no {symbol} "
                            f"(PT2RT_LITE_OP({op.namespace}, {short_name}), pt2rt/lite_op.h)")
        if symbol + "_schema" not in defined:
            raise LiteError(f"{library} does not say which schema its entry for {name} takes: it defines no "
                            f"{symbol}_schema (PT2RT_LITE_OP_SCHEMA({op.namespace}, {short_name}, \"...\"), "
                            f"pt2rt/lite_op.h)")
        written_for, exported = entry_schema(library, symbol), str(op._schema)
        if written_for != exported:
            raise LiteError(f"{library}'s entry for {name} was written for '{written_for}', the op's schema is "
                            f"'{exported}': rebuild its lite build (PT2RT_LITE_OP_SCHEMA and the entry's arguments)")
        found[name] = CustomOp(name=name, symbol=symbol, declaration=c_declaration(op), library=library, overload=op)
    short, symbols = {}, {}
    for op in found.values():
        other = short.setdefault(op.name.split("::")[1], op.name)
        if other != op.name:
            raise LiteError(f"lite calls custom ops by their name without namespace: {other} and {op.name} share it")
        other = symbols.setdefault(op.symbol, op.name)
        if other != op.name:
            raise LiteError(f"the lite entries of {other} and {op.name} would both be {op.symbol}")
    return found


def entry_schema(library: Path, symbol: str) -> str:
    """The schema a lite build's entry says it takes (its <symbol>_schema), read by loading it beside the lite
    runtime, which it needs."""
    import ctypes

    runtime = find_runtime()
    if runtime is None:
        raise LiteError(f"export checks lite builds with {LIBRARY_NAME}, which was not found (build it: make build, "
                        f"or set {ENV_VAR})")
    ctypes.CDLL(str(runtime), mode=ctypes.RTLD_GLOBAL)
    try:
        lib = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise LiteError(f"{library} does not load: {e}") from None
    address = ctypes.addressof(ctypes.c_char.in_dll(lib, symbol + "_schema"))
    return ctypes.string_at(address).decode(errors="replace")


def lite_library_of(full: Path) -> Path:
    """An ops library's lite build: lib<name>_lite.so beside lib<name>.so."""
    full = Path(full)
    stem = full.name[: -len(".so")] if full.name.endswith(".so") else full.name
    return full.with_name(f"{stem}_lite.so")  # runtime/src/parse_spec.cpp holds a spec to the same name


def op_symbol(name: str) -> str:
    """The C function of NS::OP's lite entry (PT2RT_LITE_OP(NS, OP) in pt2rt/lite_op.h)."""
    ns, op = name.split("::")
    return f"pt2rt_op_{ns}_{op}"


# schema argument types -> the C parameters inductor passes (custom_ops_to_c_shims), pt2rt/lite_op.h's table
_C_ARGUMENTS = {
    "Tensor": ["AtenTensorHandle {n}"], "Optional[Tensor]": ["AtenTensorHandle* {n}"],
    "List[Tensor]": ["const AtenTensorHandle* {n}", "int64_t {n}_len_"],
    "int": ["int64_t {n}"], "SymInt": ["int64_t {n}"], "Optional[int]": ["int64_t* {n}"],
    "Optional[SymInt]": ["int64_t* {n}"],
    "List[int]": ["const int64_t* {n}", "int64_t {n}_len_"], "List[SymInt]": ["const int64_t* {n}", "int64_t {n}_len_"],
    "float": ["double {n}"], "Optional[float]": ["double* {n}"], "bool": ["int32_t {n}"], "str": ["const char* {n}"],
}


def c_declaration(op) -> str:
    """The C declaration inductor calls in place of op (aoti_torch_cpu_<op>), from its schema."""
    schema = op._schema
    params = []
    for arg in schema.arguments:
        kind = str(arg.real_type)  # ScalarType, Layout: not their int form
        if arg.alias_info is not None and arg.alias_info.is_write:
            raise LiteError(f"lite cannot run the custom op {schema.name}: it writes its argument {arg.name}")
        if kind not in _C_ARGUMENTS:
            raise LiteError(f"lite cannot pass the custom op {schema.name} its argument {arg.name} of type {kind} "
                            f"(lite passes {', '.join(sorted(_C_ARGUMENTS))})")
        params += [p.format(n=arg.name + "_") for p in _C_ARGUMENTS[kind]]  # "_": no C++ keyword, no ret<i>
    for i, ret in enumerate(schema.returns):
        if str(ret.type) != "Tensor":
            raise LiteError(f"lite cannot run the custom op {schema.name}: it returns a {ret.type} (lite takes tensors)")
        params.append(f"AtenTensorHandle* ret{i}")
    return f"AOTITorchError aoti_torch_cpu_{schema.name.split('::')[1]}({', '.join(params)})"


def _defined(library: Path) -> set[str]:
    out = subprocess.run([_tool("nm"), "-D", "--defined-only", str(library)], capture_output=True, text=True)
    return {line.split()[-1].partition("@")[0] for line in out.stdout.splitlines() if line.split()}


def _mutated_state(ep) -> list[str]:
    """The buffers and parameters the graph writes: the signature's (after functionalization) and those an in-place
    op's written argument is (export keeps `buf.add_(1)` as it is)."""
    import torch

    names = set(ep.graph_signature.buffers_to_mutate.values())
    kinds = (torch.export.graph_signature.InputKind.BUFFER, torch.export.graph_signature.InputKind.PARAMETER)
    state = {spec.arg.name: spec.target for spec in ep.graph_signature.input_specs if spec.kind in kinds}
    for node in ep.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        for arg, value in zip(node.target._schema.arguments, node.args):
            written = arg.alias_info is not None and arg.alias_info.is_write
            if written and isinstance(value, torch.fx.Node) and value.name in state:
                names.add(state[value.name])
    return sorted(names)


def rename_header(torch_include: Path, custom_ops: tuple[CustomOp, ...] = ()) -> str:
    """#define aoti_torch_X pt2rt_lite_aoti_torch_X for every aoti_torch_ name torch's AOTInductor headers use, and
    each custom op's C function to its lite entry's name."""
    roots = [torch_include / "torch" / "csrc" / "inductor" / d
             for d in ("aoti_torch", "aoti_runtime", "aoti_include")]
    names: set[str] = set()
    for root in roots:
        for header in root.rglob("*.h"):
            names.update(re.findall(r"\baoti_torch_\w+", header.read_text(errors="replace")))
    lines = ["// made by export_tools.lite: the shim's names as the lite runtime exports them", "#pragma once"]
    names.update(re.search(r"\b(aoti_torch_\w+)\(", decl).group(1) for decl in BUILTIN_OPS.values())
    for op in custom_ops:
        called = _called(op)
        if called in names:
            raise LiteError(f"lite cannot call the custom op {op.name}: its C function {called} is a name of torch's "
                            f"shim (give the op another name)")
    lines += [f"#define {n} {PREFIX}{n}" for n in sorted(names)]
    lines += [f"#define {_called(op)} {op.symbol}" for op in custom_ops]
    return "\n".join(lines) + "\n"


def _called(op: CustomOp) -> str:
    """The name the generated code calls op by (aoti_torch_cpu_<op>)."""
    return re.search(r"\b(aoti_torch_\w+)\(", op.declaration).group(1)


def build_library(records: dict[str, bytes], torch_include: Path, target: str | None = None,
                  arch_flags: tuple[str, ...] = (), custom_ops: tuple[CustomOp, ...] = ()) -> Library:
    """Compile inductor's C++ package records (model folder relative names -> bytes) into a lite library: with
    this machine's g++, or for target (linux-aarch64) with its cross compiler and arch_flags, the weights object
    assembled again for it (export_tools.cross)."""
    from . import cross

    tc = cross.compiler(target) if target else None
    cxx = tc.cxx if tc else "g++"
    wrappers = [n for n in records if n.endswith(".wrapper.cpp")]
    if len(wrappers) != 1:
        raise LiteError(f"expected one generated wrapper source, found {wrappers}")
    stem = wrappers[0][: -len(".cpp")]
    flags = json.loads(records.get(stem + "_compile_flags.json", b"{}") or b"{}")
    if not flags:
        raise LiteError(f"inductor wrote no {stem}_compile_flags.json")
    with tempfile.TemporaryDirectory(prefix="pt2rt-lite-") as tmp:
        work = Path(tmp)
        for name, data in records.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(data)
        (work / "pt2rt_lite_names.h").write_text(rename_header(torch_include, custom_ops))
        defines = [f"-D{d.strip()}" for d in flags.get("definitions", []) if d.strip()]
        includes = ["-I", str(torch_include), "-I", str(torch_include / "torch" / "csrc" / "api" / "include")]
        if tc:  # torch's own sleef.h is its build machine's: the target's comes from Debian (libsleef-dev:arm64)
            includes = ["-I", str(_target_sleef(cxx, work))] + includes
        cflags = [f"-{f}" for f in flags.get("cflags", []) if f and f not in ("shared", "g1")]
        if tc:  # the build machine's -march is the target's flags
            cflags = [f for f in cflags if not f.startswith("-march")] + list(arch_flags)
        passthrough = " ".join(flags.get("passthrough_args", [])).split()
        library = work / "model.so"
        objects = [str(work / n) for n in records if n.endswith(".cpp")]
        for n in records:
            if n.endswith(".weights.o"):
                objects.append(str(cross.weights_object(work / n, work, tc) if tc else work / n))
        _run([cxx, *defines, *includes, *cflags, *passthrough, "-include", str(work / "pt2rt_lite_names.h"),
              "-shared", *objects, "-o", str(library), "-Wl,-z,noexecstack", "-Wl,--as-needed", "-lgomp", "-lsleef"],
             "compiling the lite model library", work)
        stripped = work / "stripped.so"
        _run([tc.objcopy if tc else _tool("objcopy"), "--strip-debug", str(library), str(stripped)],
             "stripping the lite library", work)
        undefined = _undefined(stripped)
        needed = _needed(stripped)
        data = stripped.read_bytes()
    shim = sorted(name[len(PREFIX):] for name, _ in undefined if name.startswith(PREFIX))
    missing = [n for n in shim if n not in SHIM_FUNCTIONS]
    if missing:
        raise LiteError(f"lite has no kernel for {_op_name(missing[0])} (the model library calls {missing[0]}"
                        + (f" and {len(missing) - 1} more lite lacks" if len(missing) > 1 else "")
                        + "); export without lite")
    # everything else it calls must come from the system's libraries (their names carry a version: GLIBC_,
    # GLIBCXX_, GOMP_, ...) or Sleef; an unversioned name is libtorch's or another library's
    entries = {op.symbol for op in custom_ops}
    stray = [name for name, versioned in undefined
             if not versioned and not name.startswith((PREFIX, "Sleef_")) and name not in entries]
    if stray:
        raise LiteError(f"the lite model library calls {stray[0]}, which neither the lite runtime nor the system's "
                        f"libraries provide (libtorch's?)")
    foreign = [n for n in needed if n not in LIBRARIES]
    if foreign:
        raise LiteError(f"the lite model library needs {foreign[0]}, which the lite runtime does not ship")
    return Library(data=data, shim=tuple(shim), needed=tuple(needed))


@contextlib.contextmanager
def compiling(custom_ops: tuple[CustomOp, ...] = ()):
    """inductor set up for a lite compile for the duration (inside the CPU variant's own settings): the builtin ops
    and custom_ops called as C functions."""
    from torch._inductor import config as inductor_config

    shims = {**_builtin_shims(), **{op.overload: [op.declaration] for op in custom_ops}}
    with inductor_config.patch({**INDUCTOR_CONFIG, "aot_inductor.custom_ops_to_c_shims": shims}):
        yield


def _builtin_shims() -> dict[Any, list[str]]:
    """BUILTIN_OPS for inductor: the OpOverloads this process has (recurrent.py's, where libpt2rt_kernels loaded)."""
    import torch

    shims = {}
    for name, decl in BUILTIN_OPS.items():
        ns, op = name.split("::")
        try:
            shims[getattr(getattr(torch.ops, ns), op).default] = [decl]
        except (AttributeError, RuntimeError):
            continue
    return shims


def _target_sleef(cxx: str, work: Path) -> Path:
    """A folder holding the cross compiler's multiarch sleef.h (the one the lite bundle's libsleef.so.3 matches)."""
    triplet = subprocess.run([cxx, "-print-multiarch"], capture_output=True, text=True).stdout.strip()
    header = Path("/usr/include") / triplet / "sleef.h"
    if not triplet or not header.is_file():
        raise LiteError(f"lite variants for {triplet or cxx} need Sleef's header {header} (apt-get install "
                        f"libsleef-dev:{'arm64' if triplet.startswith('aarch64') else triplet})")
    folder = work / "target-sleef"
    folder.mkdir()
    (folder / "sleef.h").symlink_to(header)
    return folder


def library_from_cpp_package(cpp_package: Path, target: str | None = None, arch_flags: tuple[str, ...] = (),
                             custom_ops: tuple[CustomOp, ...] = ()) -> Library:
    """The lite library of a package_cpp_only compile of one model (for target: build_library's)."""
    import torch
    from torch.export.pt2_archive._package import PT2ArchiveReader

    own = model_dir("model")
    with PT2ArchiveReader(str(cpp_package)) as reader:
        records = {n.split(own, 1)[1]: reader.read_bytes(n) for n in reader.get_file_names() if own in n}
    return build_library(records, Path(torch.__file__).parent / "include", target, arch_flags, custom_ops)


def _op_name(shim_name: str) -> str:
    """aoti_torch_cpu_index_put -> aten.index_put; other shim functions by their own name."""
    m = re.fullmatch(r"aoti_torch_cpu_(\w+?)(_out)?", shim_name)
    return f"aten.{m.group(1)}" if m else shim_name


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LiteError(f"lite variants need {name} (binutils) on PATH")
    return path


def _run(cmd: list[str], what: str, cwd: Path) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        text = result.stderr or result.stdout
        lines = [line for line in text.splitlines() if "error" in line.lower()] or text.strip().splitlines() or ["?"]
        raise LiteError(f"{what} failed: {lines[0].strip()}")


def _undefined(library: Path) -> list[tuple[str, bool]]:
    """(name, whether it names a symbol version) of each undefined dynamic symbol the library needs; weak ones
    (which may stay unresolved) are left out."""
    out = subprocess.run([_tool("nm"), "-D", "--undefined-only", str(library)], capture_output=True, text=True,
                         check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[-2] in ("w", "v"):
            continue
        name, _, version = parts[-1].partition("@")
        found.append((name, bool(version)))
    return found


def _needed(library: Path) -> list[str]:
    out = subprocess.run([_tool("readelf"), "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


LIBRARY_NAME = "libpt2rt_lite.so"
ENV_VAR = "PT2RT_LITE_LIBRARY"
_DTYPE_CODES = {"float32": 6, "float64": 7, "float16": 5, "bfloat16": 15, "int64": 4, "int32": 3, "int16": 2,
                "int8": 1, "uint8": 0, "bool": 11}


def find_runtime() -> Path | None:
    """The lite runtime library (runtime/lite) for checking lite libraries here: $PT2RT_LITE_LIBRARY, else this
    checkout's build tree, else <sys.prefix>/lib."""
    from . import libraries

    return libraries.find_built(LIBRARY_NAME, ENV_VAR)


class Runner:
    """Runs a lite model library in this process through the lite runtime's shim (no libtorch in its calls: its
    names are the shim's own, beside torch's). For export's golden check; programs use the lite C API."""

    def __init__(self, library: bytes, runtime: Path, ops_libraries: tuple[Path, ...] = ()):
        import ctypes

        self._ct = ctypes
        self._shim = ctypes.CDLL(str(runtime), mode=ctypes.RTLD_GLOBAL)  # the model library resolves against it
        # the custom ops' lite entries, which resolve the shim's names and which the model library calls
        self._ops = [ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL) for path in ops_libraries]
        self._dir = tempfile.TemporaryDirectory(prefix="pt2rt-lite-run-")
        path = Path(self._dir.name) / "model.so"
        path.write_bytes(library)
        self._model = ctypes.CDLL(str(path))
        self._handle = ctypes.c_void_p()
        p = ctypes.c_void_p
        self._shim.pt2rt_lite_shim_last_error.restype = ctypes.c_char_p
        for name in ("get_sizes", "get_strides"):
            getattr(self._shim, f"pt2rt_lite_aoti_torch_{name}").argtypes = [p, ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))]
        self._shim.pt2rt_lite_aoti_torch_create_tensor_from_blob.argtypes = [
            p, ctypes.c_int64, p, p, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(p)]
        self._model.AOTInductorModelContainerCreateWithDevice.argtypes = [ctypes.POINTER(p), ctypes.c_size_t,
                                                                         ctypes.c_char_p, ctypes.c_char_p]
        self._model.AOTInductorModelContainerRun.argtypes = [p, p, ctypes.c_size_t, p, ctypes.c_size_t, p, p]
        self._model.AOTInductorModelContainerGetNumOutputs.argtypes = [p, ctypes.POINTER(ctypes.c_size_t)]
        self._model.AOTInductorModelContainerDelete.argtypes = [p]
        if self._model.AOTInductorModelContainerCreateWithDevice(ctypes.byref(self._handle), 1, b"cpu", None) != 0:
            raise LiteError(f"the lite model library did not load: {self._error()}")
        n = ctypes.c_size_t()
        self._model.AOTInductorModelContainerGetNumOutputs(self._handle, ctypes.byref(n))
        self._num_outputs = n.value

    def _error(self) -> str:
        return (self._shim.pt2rt_lite_shim_last_error() or b"").decode(errors="replace") or "no message"

    def __call__(self, *inputs):
        import torch

        ct, shim = self._ct, self._shim
        kept = [t.contiguous() for t in inputs]
        handles = (ct.c_void_p * max(len(kept), 1))()
        for i, t in enumerate(kept):
            sizes = (ct.c_int64 * max(t.dim(), 1))(*t.shape)
            strides = (ct.c_int64 * max(t.dim(), 1))(*t.stride())
            code = _DTYPE_CODES[str(t.dtype).removeprefix("torch.")]
            handle = ct.c_void_p()
            if shim.pt2rt_lite_aoti_torch_create_tensor_from_blob(t.data_ptr(), t.dim(), sizes, strides, 0, code, 0, 0,
                                                                 ct.byref(handle)) != 0:
                raise LiteError(f"lite input {i}: {self._error()}")
            handles[i] = handle.value  # the run takes it over
        outputs = (ct.c_void_p * max(self._num_outputs, 1))()
        if self._model.AOTInductorModelContainerRun(self._handle, handles, len(kept), outputs, self._num_outputs,
                                                     None, None) != 0:
            raise LiteError(f"the lite model library failed: {self._error()}")
        return [self._take(outputs[i], torch) for i in range(self._num_outputs)]

    def _take(self, handle, torch):
        """A torch copy of a lite output tensor; the lite tensor is freed."""
        ct, shim = self._ct, self._shim
        h = ct.c_void_p(handle)
        dim, dtype, offset, data = ct.c_int64(), ct.c_int32(), ct.c_int64(), ct.c_void_p()
        sizes_p, strides_p = ct.POINTER(ct.c_int64)(), ct.POINTER(ct.c_int64)()
        shim.pt2rt_lite_aoti_torch_get_dim(h, ct.byref(dim))
        shim.pt2rt_lite_aoti_torch_get_dtype(h, ct.byref(dtype))
        shim.pt2rt_lite_aoti_torch_get_sizes(h, ct.byref(sizes_p))
        shim.pt2rt_lite_aoti_torch_get_strides(h, ct.byref(strides_p))
        shim.pt2rt_lite_aoti_torch_get_data_ptr(h, ct.byref(data))
        sizes = [sizes_p[i] for i in range(dim.value)]
        strides = [strides_p[i] for i in range(dim.value)]
        torch_dtype = getattr(torch, {v: k for k, v in _DTYPE_CODES.items()}[dtype.value])
        item = torch.empty((), dtype=torch_dtype).element_size()
        span = 1 + sum((s - 1) * st for s, st in zip(sizes, strides)) if all(sizes) else 0
        raw = bytearray(ct.string_at(data.value, span * item)) if span else bytearray()
        flat = torch.frombuffer(raw, dtype=torch_dtype) if raw else torch.empty(0, dtype=torch_dtype)
        out = flat.as_strided(sizes, strides).clone() if span else torch.empty(sizes, dtype=torch_dtype)
        shim.pt2rt_lite_aoti_torch_delete_tensor_object(h)
        return out

    def close(self) -> None:
        if self._handle:
            self._model.AOTInductorModelContainerDelete(self._handle)
            self._handle = self._ct.c_void_p()
        self._dir.cleanup()
