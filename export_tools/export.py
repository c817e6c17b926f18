"""torch.export -> aoti_compile_and_package, with a spec and golden cases inside the package.

export_package() is all-or-nothing: it writes into a temporary directory next to the target and renames the
finished, verified package into place; on any error nothing is left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from . import cpu, libraries
from . import golden as _golden
from ._version import read as _version

log = logging.getLogger("export_tools")

SPEC_FORMAT = "pt2rt-spec/2"
SPEC_KEY = "pt2rt_spec"                  # key of the spec in the AOTI metadata
GOLDEN_RECORD = "pt2rt/golden.pt"        # golden cases, relative to the archive root
DEVICES = ("cpu", "cuda")
_BUILTIN_NAMESPACES = {"aten", "prims", "prim", "higher_order", "_c10d_functional", "c10d_functional", "quantized",
                       "_quantized", "mkldnn", "onednn", "_inductor_test", "inductor", "profiler"}


class ExportError(Exception):
    """A problem with what the caller asked for, said in one line; nothing was written."""


@contextlib.contextmanager
def _stage(name: str) -> Iterator[None]:
    start = time.perf_counter()
    log.info("%s ...", name)
    yield
    log.info("%s done in %.1f s", name, time.perf_counter() - start)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def export_package(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], package_path: str | os.PathLike,
                   *, dynamic_batch: tuple[int, int] | None = None, golden: int = 4,
                   cpu_isa: str | Sequence[str] | None = None,
                   device: str = "cpu", metadata: dict[str, str] | None = None,
                   ops_libraries: Sequence[str | os.PathLike] = (),
                   tolerances: dict[str, tuple[float, float]] | None = None) -> Path:
    """Export `model` to a self-describing, self-verifying AOTInductor package at `package_path` (.pt2).

    dynamic_batch: (min, max) for a dynamic dim 0 shared by every input; None for static shapes.
    golden: number of golden cases (the example plus golden-1 random inputs), >= 1.
    cpu_isa: the CPU code variants, one compile each, all in the one package: "native" (None: this machine's best,
        -march=native), or the portable x86-64 levels "avx512", "avx2", "default" (no SIMD); a sequence or a
        comma-separated string for several (e.g. ("avx2", "avx512")). The runtime loads the best one the CPU runs.
    device: "cpu" or "cuda". metadata: extra str -> str pairs stored in the spec.
    ops_libraries: paths of ops libraries to load (load_ops_library) before exporting. Libraries loaded otherwise
        (an ops package's import, torch.ops.load_library) are found too; see export_tools.libraries.
    tolerances: dtype name -> (rtol, atol) overriding torch.testing's defaults for the golden check.
    """
    path = Path(package_path)
    inputs = _check_arguments(model, example_inputs, path, dynamic_batch, golden, device, metadata)
    try:
        for library in ops_libraries:
            libraries.load_ops_library(library)
    except libraries.OpsLibraryError as e:
        raise ExportError(str(e)) from None
    try:
        variant_names = cpu.parse_names(cpu_isa) if device == "cpu" else [cpu.NATIVE]
    except cpu.CpuVariantError as e:
        raise ExportError(str(e)) from None
    if device != "cpu" and cpu_isa is not None:
        raise ExportError(f"cpu_isa applies to CPU packages; this is a {device} package")
    was_training = model.training
    try:
        return _export_checked(model, inputs, path, device, dynamic_batch, golden, metadata, tolerances,
                               variant_names)
    finally:
        model.train(was_training)  # the caller's module leaves as it came (eval() is in place)


def _export_checked(model, inputs, path, device, dynamic_batch, golden, metadata, tolerances,
                    variant_names) -> Path:
    model = model.eval().to(device)
    inputs = [t.to(device) for t in inputs]

    with _stage("eager"):
        def run(args: list[torch.Tensor]) -> list[torch.Tensor]:
            with torch.no_grad():
                return _flatten_outputs(model(*args))
        try:
            expected = run(inputs)
        except Exception as e:
            raise ExportError(f"the model fails on its example inputs: {_first_line(e)}") from e

    with _stage("export"):
        ep = _export(model, inputs, dynamic_batch)
        used = _custom_calls(ep)
        spec = _spec(ep, path, device, dynamic_batch, used, metadata, len(expected))

    with _stage("golden cases"):
        cases = _golden.make_cases(run, inputs, golden, dynamic_batch)
        spec["golden"] = {"location": "package", "record": GOLDEN_RECORD, "count": len(cases),
                          "names": [c.name for c in cases], "tolerances": _tolerance_table(cases, tolerances)}

    out_dir = path.parent.resolve()
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.stem}.", dir=out_dir))
    try:
        final = tmp / "final" / path.name   # same file name: the archive's root folder is named after it
        final.parent.mkdir()
        compiled = []
        for name in variant_names:
            out = tmp / name / path.name
            out.parent.mkdir()
            with _stage(f"compile ({name})"):
                compiled.append((_compile(ep, out, name), out))
        with _stage("package"):
            _finish_package(compiled, final, spec, _golden.dumps(cases))
        with _stage("verify"):
            report = verify_package(final, tolerances)
            if not report:
                lacking = "; ".join(f"{v['isa']} needs {', '.join(cpu.runs_here(v['arch'], v['cpu_features']))}"
                                    for v in spec["variants"])
                raise ExportError(f"none of the package's CPU variants runs on this machine, so it cannot be verified "
                                  f"before it is written ({lacking}); add one that does, e.g. cpu_isa native")
            failed = [r for r in report if not r["passed"]]
            if failed:
                f = failed[0]
                raise ExportError(f"the compiled package does not reproduce the eager model: variant {f['variant']}, "
                                  f"case {f['name']}: {f['reason']} ({len(failed)} of {len(report)} cases failed)")
        os.replace(final, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("wrote %s (%d golden cases verified)", path, len(cases))
    return path


def _check_arguments(model, example_inputs, path: Path, dynamic_batch, golden_count, device, metadata):
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"expected the model to be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)) or not example_inputs:
        raise ExportError(f"expected example inputs as a non-empty tuple of tensors, got {type(example_inputs).__name__}")
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            raise ExportError(f"expected example input {i} to be a tensor, got {type(t).__name__}")
    if path.suffix != ".pt2":
        raise ExportError(f"expected a package path ending in .pt2, got {str(path)!r}")
    out_dir = path.parent if str(path.parent) else Path(".")
    if not out_dir.is_dir():
        raise ExportError(f"output directory {out_dir} does not exist")
    try:  # os.access says yes to root even on read-only file systems; try it
        os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=out_dir))
    except OSError as e:
        raise ExportError(f"output directory {out_dir} is not writable ({e.strerror})") from e
    if path.is_dir():
        raise ExportError(f"{path} is a directory; expected a package file path")
    if device not in DEVICES:
        raise ExportError(f"expected device cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ExportError("device cuda was asked for, but torch sees no CUDA device on this machine "
                          f"(torch {torch.__version__}); compile CUDA packages on a machine with a GPU")
    if not isinstance(golden_count, int) or golden_count < 1:
        raise ExportError(f"expected golden >= 1, got {golden_count!r}")
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ExportError("expected metadata as a dict of str to str")
    if dynamic_batch is not None:
        if (not isinstance(dynamic_batch, (tuple, list)) or len(dynamic_batch) != 2
                or not all(isinstance(v, int) for v in dynamic_batch)):
            raise ExportError(f"expected dynamic_batch as (min, max), got {dynamic_batch!r}")
        lo, hi = dynamic_batch
        if not 1 <= lo <= hi:
            raise ExportError(f"expected a dynamic batch range with 1 <= min <= max, got {lo}:{hi}")
        for i, t in enumerate(example_inputs):
            if t.dim() == 0:
                raise ExportError(f"a dynamic batch needs a batch dim, but example input {i} is a scalar")
            if not lo <= t.shape[0] <= hi:
                raise ExportError(f"example input {i} has batch {t.shape[0]}, outside the dynamic batch range {lo}:{hi}")
    return list(example_inputs)


def _flatten_outputs(out: Any) -> list[torch.Tensor]:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, t in enumerate(outs):
        if not isinstance(t, torch.Tensor):
            raise ExportError(f"expected the model to return a tensor or a tuple of tensors; output {i} is "
                              f"{type(t).__name__}")
    return outs


def _export(model, inputs, dynamic_batch) -> torch.export.ExportedProgram:
    dynamic_shapes = None
    if dynamic_batch is not None:
        batch = torch.export.Dim("batch", min=dynamic_batch[0], max=dynamic_batch[1])
        dynamic_shapes = tuple({0: batch} for _ in inputs)
        if dynamic_batch[1] >= 2 and any(t.shape[0] == 1 for t in inputs):
            # torch.export specialises a size-1 example dim to the constant 1: trace with the example doubled
            # along the batch (the graph runs batch 1 all the same; the example stays a golden case).
            inputs = [torch.cat([t, t]) for t in inputs]
    try:
        return torch.export.export(model, tuple(inputs), dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as e:
        what = (f"with a dynamic batch {dynamic_batch[0]}:{dynamic_batch[1]}" if dynamic_batch else "")
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        reason = next((line[2:] for line in lines if line.startswith("- ")), "")  # the first violated constraint
        detail = _first_line(e) + (f" {reason}" if reason else "")
        raise ExportError(f"torch.export failed {what}: {detail}".replace("  ", " ")) from e


def _custom_calls(ep: torch.export.ExportedProgram) -> dict[str, Any]:
    """The custom ops and classes the graph calls; checks that each torchbind object is used via call_torchbind."""
    ops_used: dict[str, torch._ops.OpOverload] = {}
    classes: dict[str, set[str]] = {}
    called_objects: set[str] = set()
    call_torchbind = torch.ops.higher_order.call_torchbind
    # torchbind objects are graph inputs (placeholders) that the signature maps to constants
    obj_targets = {spec.arg.name: spec.target for spec in ep.graph_signature.input_specs
                   if spec.kind == torch.export.graph_signature.InputKind.CUSTOM_OBJ}
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if target is call_torchbind:
            obj_node, method = node.args[0], node.args[1]
            target_name = obj_targets.get(obj_node.name, obj_node.target)
            called_objects.add(target_name)
            obj = ep.constants.get(target_name)
            qualified = _class_name(obj if obj is not None else obj_node.meta.get("val"))
            classes.setdefault(qualified, set()).add(str(method))
        elif isinstance(target, torch._ops.OpOverload) and target.namespace not in _BUILTIN_NAMESPACES:
            ops_used[str(target)] = target
    for name, value in ep.constants.items():
        if isinstance(value, torch.ScriptObject) and name not in called_objects:
            raise ExportError(f"the model holds a {_class_name(value)} object ({name}) that the exported graph "
                              f"does not call through call_torchbind")
    return {"ops": dict(sorted(ops_used.items())), "classes": {k: sorted(v) for k, v in sorted(classes.items())}}


def _class_name(obj: Any) -> str:
    # "__torch__.torch.classes.<ns>.<Class>" -> "<ns>::<Class>"
    qualified = getattr(obj, "script_class_name", None)  # a fake object while tracing
    if qualified is None:
        qualified = obj._type().qualified_name()
    parts = str(qualified).split(".")
    return f"{parts[-2]}::{parts[-1]}" if len(parts) >= 2 else str(qualified)


def _library_for(namespace: str) -> str:
    try:
        return libraries.provider_of(namespace).name
    except libraries.OpsLibraryError as e:
        raise ExportError(str(e)) from None


def _dims(t: torch.Tensor, ep: torch.export.ExportedProgram, batch_name: str | None) -> tuple[list[int], list[dict]]:
    shape, dynamic = [], []
    for d, size in enumerate(t.shape):
        if isinstance(size, int):
            shape.append(size)
            continue
        expr = size.node.expr
        rng = ep.range_constraints.get(expr)
        entry: dict[str, Any] = {"dim": d, "name": batch_name if batch_name and d == 0 else str(expr)}
        if rng is not None:
            entry["min"] = int(rng.lower)
            entry["max"] = int(rng.upper) if rng.upper.is_finite else None
        if not expr.is_Symbol:
            entry["expr"] = str(expr)
        shape.append(-1)
        dynamic.append(entry)
    return shape, dynamic


def _spec(ep, path: Path, device, dynamic_batch, used, metadata, n_outputs) -> dict[str, Any]:
    batch_name = "batch" if dynamic_batch else None
    sig = ep.graph_signature
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    inputs = []
    for name in sig.user_inputs:
        val = placeholders[name].meta["val"]
        shape, dynamic = _dims(val, ep, batch_name)
        inputs.append({"name": name, "dtype": _golden.dtype_name(val.dtype), "shape": shape, "dynamic_dims": dynamic})
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    outputs = []
    for i, node in enumerate(output_node.args[0][:n_outputs]):
        val = node.meta["val"]
        shape, dynamic = _dims(val, ep, batch_name)
        outputs.append({"name": f"output_{i}", "dtype": _golden.dtype_name(val.dtype), "shape": shape,
                        "dynamic_dims": dynamic})
    custom_ops = [{"name": op._schema.name, "overload": op._schema.overload_name,
                   "namespace": op.namespace, "schema": libraries.op_schema(op), "library": _library_for(op.namespace)}
                  for op in used["ops"].values()]
    custom_classes = [{"name": cls, "namespace": cls.split("::")[0], "methods": methods,
                       "method_schemas": libraries.class_method_schemas(cls, methods),
                       "library": _library_for(cls.split("::")[0])}
                      for cls, methods in used["classes"].items()]
    return {
        "format": SPEC_FORMAT,
        "model": path.stem,
        "device": device,
        "inputs": inputs,
        "outputs": outputs,
        "custom_ops": custom_ops,
        "custom_classes": custom_classes,
        "libraries": sorted({e["library"] for e in custom_ops + custom_classes}),
        "torch_version": torch.__version__,
        "cuda": ({"version": torch.version.cuda,
                  "compute_capability": "%d.%d" % torch.cuda.get_device_capability()} if device == "cuda" else None),
        "variants": None,
        "golden": None,
        "metadata": dict(metadata or {}),
        "created_by": f"export_tools {_version()}",
    }


def _tolerance_table(cases, overrides) -> dict[str, dict[str, float]]:
    dtypes = {t.dtype for c in cases for t in c.outputs}
    table = {}
    for dt in sorted(dtypes, key=str):
        rtol, atol = (overrides or {}).get(_golden.dtype_name(dt), _golden.tolerance_for(dt))
        table[_golden.dtype_name(dt)] = {"rtol": rtol, "atol": atol}
    return table


def _compile(ep, out: Path, name: str) -> cpu.Variant:
    """One CPU variant into its own package file. Each compile gets a fresh inductor cache: with a shared one, a
    later compile of the same graph can be handed an earlier compile's generated code."""
    from torch._inductor.utils import fresh_cache

    try:
        with cpu.compiling(name) as variant, fresh_cache():
            torch._inductor.aoti_compile_and_package(ep, package_path=str(out))
    except cpu.CpuVariantError as e:
        raise ExportError(str(e)) from None
    except Exception as e:
        raise ExportError(f"aoti_compile_and_package failed for cpu_isa {name}: {_first_line(e)}") from e
    return variant


MODEL_DIR = "data/aotinductor/"


def _variant_model_name(index: int, name: str) -> str:
    # The first variant keeps AOTInductor's default name, so torch's own loaders find it.
    return "model" if index == 0 else f"model_{name}"


def _finish_package(compiled: list[tuple[cpu.Variant, Path]], final: Path, spec: dict[str, Any],
                    golden_bytes: bytes) -> None:
    """One archive from the variants' packages: each variant's model folder under its own model name, the shared
    records once (they must agree), the spec with every variant's library SHA-256 in every model's metadata, and
    the golden cases."""
    from torch.export.pt2_archive._package import PT2ArchiveReader

    records: dict[str, bytes] = {}
    spec["variants"] = []
    for index, (variant, package) in enumerate(compiled):
        model_name = _variant_model_name(index, variant.name)
        with PT2ArchiveReader(str(package)) as reader:
            names = [n for n in reader.get_file_names() if n != ".data/serialization_id"]  # the writer makes its own
            own = MODEL_DIR + "model/"
            libs = [n for n in names if n.startswith(own) and n.endswith(".so")]
            if len(libs) != 1:
                raise ExportError(f"expected one compiled model library in the {variant.name} compile, found {libs}")
            for n in names:
                data = reader.read_bytes(n)
                if n == libs[0]:
                    lib_bytes = data
                if n.startswith(own):
                    records[MODEL_DIR + model_name + "/" + n[len(own):]] = data
                elif n.startswith(MODEL_DIR):
                    raise ExportError(f"unexpected record {n} in the {variant.name} compile")
                elif records.setdefault(n, data) != data:
                    raise ExportError(f"the {variant.name} compile's {n} differs from the first compile's")
        spec["variants"].append({
            "isa": variant.name, "model": model_name, "arch": variant.arch, "vec_isa": variant.vec_isa,
            "compile_flags": list(variant.flags), "cpu_features": list(variant.cpu_features),
            "record": MODEL_DIR + model_name + "/" + libs[0][len(MODEL_DIR + "model/"):],
            "sha256": hashlib.sha256(lib_bytes).hexdigest(), "size": len(lib_bytes),
        })
    _write_archive(final, records, spec, golden_bytes)


def _write_archive(final: Path, records: dict[str, bytes], spec: dict[str, Any], golden_bytes: bytes) -> None:
    from torch.export.pt2_archive._package import PT2ArchiveWriter

    with PT2ArchiveWriter(str(final)) as writer:
        for name, data in records.items():
            if name.startswith(MODEL_DIR) and name.endswith("_metadata.json"):
                md = json.loads(data)
                md[SPEC_KEY] = json.dumps(spec)
                data = json.dumps(md).encode()
            writer.write_bytes(name, data)
        writer.write_bytes(GOLDEN_RECORD, golden_bytes)


def read_spec(package_path: str | os.PathLike) -> dict[str, Any]:
    """The spec of a package, read from the archive without loading anything."""
    import zipfile

    path = Path(package_path)
    if not path.is_file():
        raise ExportError(f"{path} is not a file")
    try:
        with zipfile.ZipFile(path) as zf:
            records = [n for n in zf.namelist() if "/data/aotinductor/" in n and n.endswith("_metadata.json")]
            if not records:
                raise ExportError(f"{path} is not an AOTInductor package (no model metadata inside)")
            md = json.loads(zf.read(sorted(records)[0]))
    except zipfile.BadZipFile as e:
        raise ExportError(f"{path} is not a .pt2 package (not a zip archive)") from e
    if SPEC_KEY not in md:
        raise ExportError(f"{path} has no {SPEC_KEY} in its metadata: it was not made by export_tools")
    spec = json.loads(md[SPEC_KEY])
    if spec.get("format") != SPEC_FORMAT:
        raise ExportError(f"{path}: unsupported spec format {spec.get('format')!r}, expected {SPEC_FORMAT}")
    return spec


def read_golden(package_path: str | os.PathLike) -> list[_golden.Case]:
    from torch.export.pt2_archive._package import PT2ArchiveReader

    with PT2ArchiveReader(str(package_path)) as reader:
        return _golden.loads(reader.read_bytes(GOLDEN_RECORD))


def select_variant(spec: dict[str, Any], cpu_isa: str | None = None) -> dict[str, Any]:
    """The variant pt2rt would load here: `cpu_isa` if given, else the most specialised one this machine runs."""
    by_isa = {v["isa"]: v for v in spec["variants"]}
    if cpu_isa is not None:
        if cpu_isa not in by_isa:
            raise ExportError(f"the package has no CPU variant {cpu_isa} (it has: {', '.join(by_isa)})")
        lacking = cpu.runs_here(by_isa[cpu_isa]["arch"], by_isa[cpu_isa]["cpu_features"])
        if lacking and spec["device"] == "cpu":
            raise ExportError(f"CPU variant {cpu_isa} needs {', '.join(lacking)}, which this machine lacks")
        return by_isa[cpu_isa]
    runnable = [v for v in spec["variants"] if not cpu.runs_here(v["arch"], v["cpu_features"])]
    if not runnable:
        raise ExportError(f"no CPU variant of the package runs on this machine (it has: {', '.join(by_isa)})")
    return max(runnable, key=lambda v: len(v["cpu_features"]))


def load_package(package_path: str | os.PathLike, cpu_isa: str | None = None):
    """The package's best variant for this machine (or `cpu_isa`), loaded in Python - a callable like
    torch._inductor.aoti_load_package's, which loads every variant, also ones this CPU cannot execute."""
    from torch.export.pt2_archive._package import AOTICompiledModel

    variant = select_variant(read_spec(package_path), cpu_isa)
    return AOTICompiledModel(torch._C._aoti.AOTIModelPackageLoader(str(package_path), variant["model"], False, 1, -1))


def verify_package(package_path: str | os.PathLike,
                   tolerances: dict[str, tuple[float, float]] | None = None) -> list[dict[str, Any]]:
    """Run each CPU variant that this machine can execute (a CUDA package's one) on the golden cases in Python;
    one report entry per variant and case. Variants this CPU cannot run are left out."""
    spec = read_spec(package_path)
    libraries.check_registered(spec)
    table = {k: (v["rtol"], v["atol"]) for k, v in spec["golden"]["tolerances"].items()}
    table.update(tolerances or {})
    cases = read_golden(package_path)
    report = []
    for variant in spec["variants"]:
        if spec["device"] == "cpu" and cpu.runs_here(variant["arch"], variant["cpu_features"]):
            continue
        runner = load_package(package_path, variant["isa"])
        for case in cases:
            args = [t.to(spec["device"]) for t in case.inputs]
            with torch.no_grad():
                actual = _flatten_outputs(runner(*args))
            passed, max_abs, max_rel, reason = _golden.compare(actual, case.outputs, table)
            report.append({"variant": variant["isa"], "name": case.name, "passed": passed, "max_abs_error": max_abs,
                           "max_rel_error": max_rel, "reason": reason})
    return report
