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
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from . import attention, compat, convolutions, cpu, dynamic, libraries, linear, recurrent
from . import golden as _golden
from . import lite as _lite
from ._version import read as _version
from .errors import CpuVariantError, ExportError, TargetTorchError, first_line
from .layout import GOLDEN_RECORD, MODELS_DIR, SPEC_FORMAT, SPEC_KEY, model_dir
from .package import flatten_outputs as _flatten_outputs, verify_package

log = logging.getLogger("export_tools")

DEVICES = ("cpu", "cuda")
_BUILTIN_NAMESPACES = {"aten", "prims", "prim", "higher_order", "_c10d_functional", "c10d_functional", "quantized",
                       "_quantized", "mkldnn", "onednn", "_inductor_test", "inductor", "profiler"}


@dataclass(frozen=True)
class _GoldenPlan:
    """What export_package was asked for its golden cases, checked."""
    count: int                              # golden=
    given: list[list[torch.Tensor]]         # golden_inputs=, each case a list
    max_mb: float | None                    # golden_max_mb=
    tolerances: dict[str, tuple] | None
    allow_degenerate: bool


@dataclass(frozen=True)
class _Plan:
    """What export_package was asked for, checked: everything the export needs besides the model and its inputs."""
    path: Path
    device: str
    dims: Any                               # dynamic.normalize's (None: static)
    variants: list[str]                     # cpu.plan's names, compiled in this order
    metadata: dict[str, str] | None
    golden: _GoldenPlan
    optimize: str                           # OPTIMIZE's
    lite: bool


@contextlib.contextmanager
def _stage(name: str) -> Iterator[None]:
    start = time.perf_counter()
    log.info("%s ...", name)
    yield
    log.info("%s done in %.1f s", name, time.perf_counter() - start)


def export_package(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], package_path: str | os.PathLike,
                   *, dynamic_batch: tuple[int, int] | None = None, dynamic_shapes: Any = None, golden: int = 4,
                   cpu_isa: str | Sequence[str] | None = None, target: str | Sequence[str] | None = None,
                   device: str = "cpu", metadata: dict[str, str] | None = None,
                   ops_libraries: Sequence[str | os.PathLike] = (),
                   tolerances: dict[str, tuple] | None = None, allow_degenerate_golden: bool = False,
                   golden_max_mb: float | None = 16,
                   golden_inputs: Sequence[Sequence[torch.Tensor] | torch.Tensor] = (),
                   optimize: str = "fold", lite: bool = False) -> Path:
    """Export `model` to a self-describing, self-verifying AOTInductor package at `package_path` (.pt2).

    dynamic_batch: (min, max) for a dynamic dim 0 shared by every input (the shorthand for a Dim "batch").
    dynamic_shapes: torch.export's own, for any dims: a tuple with one entry per input or a dict keyed by the
        forward's parameter names, each None, {dim: torch.export.Dim} or a tuple of Dim/None per dim; equal Dims
        are one size. None (and no dynamic_batch): static shapes.
    golden: number of golden cases (the example plus golden-1 random inputs), >= 1; with dynamic dims and golden > 1,
        at least the corners (every dim at its min, each at its max) and one case between.
    cpu_isa: the CPU code variants, one compile each, all in the one package: "native" (None: this machine's best,
        -march=native), or the portable x86-64 levels "avx512", "avx2", "default" (no SIMD), or "neon" (aarch64); a
        sequence or a comma-separated string for several (e.g. ("avx2", "avx512")). The runtime loads the best one
        the CPU runs.
    target: where the package runs: "host" (None; this machine), "linux-x86_64", "linux-aarch64", or several
        (("linux-x86_64", "linux-aarch64")): one package with variants for each. Each target takes the cpu_isa names
        of its arch, else its default (native here, neon for aarch64). Variants for another arch are cross-compiled
        (export_tools.cross: PT2RT_TORCH_LINUX_AARCH64) and verified on their target (`pt2run verify`), not here.
    device: "cpu" or "cuda". metadata: extra str -> str pairs stored in the spec.
    ops_libraries: paths of ops libraries to load (load_ops_library) before exporting. Libraries loaded otherwise
        (an ops package's import, torch.ops.load_library) are found too; see export_tools.libraries.
    tolerances: dtype name -> (rtol, atol, atol_rel) overriding the golden check's defaults (golden.DEFAULT_TOLERANCES:
        atol_rel * an output's max |value| is its absolute slack); (rtol, atol) for a fixed absolute atol.
    golden_max_mb: the golden cases' tensors (inputs and outputs) are kept within this many MiB (None: no cap); cases
        past it are left out with a warning and listed in the spec (the example is always kept).
    allow_degenerate_golden: export even when a floating output is all zeros or constant in every golden case (a
        check on it cannot fail for a wrong model); a warning instead of an ExportError.
    golden_inputs: golden cases of your own, each a tuple of inputs like example_inputs (a tensor alone for a
        one-input model), within the dynamic ranges: recorded after the example, before the generated cases, which
        only add sizes these do not have. Give them when generated inputs are not what the model is for (a
        mask, token ids, values with a meaning); generated bool and integer inputs follow the example's pattern.
    optimize: what the compile may do to the weights (CPU packages; docs/performance.md): "fold" (the default)
        compiles them in as constants (inductor's freezing): batch norms folded into their convolutions, constant
        subgraphs computed once, the same kernels otherwise, NaN and inf propagating as in eager (ResNet-18 -30 %).
        "none": they stay parameters, as the model holds them.
    lite: also compile variants that need no libtorch, for pt2rt-lite (export_tools.lite, docs/lite.md), checked
        on the golden cases here with the lite runtime's shim; a model lite cannot run (a TorchBind class, an op
        with no lite kernel) is refused with a LiteError naming it.
    """
    path = Path(package_path)
    if not compat.supported():
        log.warning("torch %s is outside the supported range %d.%d .. %d.%d: the package is exported, but untested "
                    "with it", torch.__version__, *compat.OLDEST, *compat.NEWEST)
    if not isinstance(lite, bool):
        raise ExportError(f"expected lite as True or False, got {lite!r}")
    if lite and device != "cpu":
        raise ExportError(f"lite variants run on the CPU; this is a {device} package")
    if optimize not in OPTIMIZE:
        raise ExportError(f"expected optimize as one of {', '.join(OPTIMIZE)}, got {optimize!r}")
    inputs = _check_arguments(model, example_inputs, path, dynamic_batch, golden, device, metadata)
    given = _check_golden_inputs(golden_inputs, inputs)
    if golden_max_mb is not None and (isinstance(golden_max_mb, bool) or not isinstance(golden_max_mb, (int, float))
                                      or not golden_max_mb > 0):
        raise ExportError(f"expected golden_max_mb as a number of MiB > 0 (or None), got {golden_max_mb!r}")
    dims = dynamic.normalize(model, inputs, dynamic_batch, dynamic_shapes)
    for library in ops_libraries:
        libraries.load_ops_library(library)
    variant_names = cpu.plan(target, cpu_isa) if device == "cpu" else [cpu.NATIVE]
    if device != "cpu" and cpu_isa is not None:
        raise ExportError(f"cpu_isa applies to CPU packages; this is a {device} package")
    if device != "cpu" and target is not None and cpu.parse_targets(target) != [cpu.host_target()]:
        raise ExportError(f"target applies to CPU packages; a {device} package runs where it was compiled")
    plan = _Plan(path=path, device=device, dims=dims, variants=variant_names, metadata=metadata,
                 golden=_GoldenPlan(count=golden, given=given, max_mb=golden_max_mb, tolerances=tolerances,
                                    allow_degenerate=allow_degenerate_golden),
                 optimize=optimize if device == "cpu" else "none", lite=lite)
    was_training = model.training
    try:
        with warnings.catch_warnings():
            # torch warning about its own internals on the way (pytree's LeafSpec): nothing the caller can act on
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                    category=FutureWarning)
            return _export_checked(model, inputs, plan)
    finally:
        model.train(was_training)  # the caller's module leaves as it came (eval() is in place)


def _export_checked(model: torch.nn.Module, inputs: list[torch.Tensor], plan: _Plan) -> Path:
    path, device, dims, golden = plan.path, plan.device, plan.dims, plan.golden
    model = model.eval().to(device)
    inputs = [t.to(device) for t in inputs]
    given = [[t.to(device) for t in case] for case in golden.given]

    with _stage("eager"):
        def run(args: list[torch.Tensor]) -> list[torch.Tensor]:
            with torch.no_grad():
                return _flatten_outputs(model(*args))
        try:
            expected = run(inputs)
        except Exception as e:
            raise ExportError(f"the model fails on its example inputs: {first_line(e)}") from e

    with _stage("export"):
        ep = _export(model, inputs, dims)
        if device == "cpu":
            # Winograd's weights transformed once where they are folded into constants, not on every call
            ep = convolutions.fuse(recurrent.fuse(ep), winograd=plan.optimize == "fold")
            ep = attention.fuse(ep)
            if plan.optimize == "fold":  # the weights' panels laid out once, not on every call
                ep = linear.fuse(ep, plan.variants)
        used = _custom_calls(ep)
        lite_ops = _lite.refuse_unrunnable(used, ep) if plan.lite else {}
        spec = _spec(ep, path, device, dims, used, plan.metadata, len(expected))
        for op in spec["custom_ops"]:
            if op["name"] in lite_ops:
                op["lite_library"] = lite_ops[op["name"]].library.name

    with _stage("golden cases"):
        # golden=1: the example alone; more: the corners of every dynamic range always, then cases between
        sizes = (dynamic.case_sizes(dynamic.roots(spec["inputs"], inputs), golden.count - 1)
                 if golden.count > 1 else [])
        cap = None if golden.max_mb is None else int(golden.max_mb * (1 << 20))
        _check_given_shapes(given, spec["inputs"], inputs)
        try:
            cases, left_out = _golden.make_cases(run, inputs, spec["inputs"], sizes, max_bytes=cap, given=given)
        except Exception as e:
            raise ExportError(f"the model fails on a golden case: {first_line(e)}") from e
        for name, size in left_out:
            log.warning("golden case %s (%.1f MiB) left out: the cases would pass golden_max_mb %g", name,
                        size / (1 << 20), golden.max_mb)
        if cap is not None and _golden.case_bytes(cases[0]) > cap:
            log.warning("the example alone is %.1f MiB, over golden_max_mb %g (kept)",
                        _golden.case_bytes(cases[0]) / (1 << 20), golden.max_mb)
        degenerate = _golden.degenerate_outputs(cases)
        if degenerate and not golden.allow_degenerate:
            raise ExportError(f"the golden cases cannot check {next(iter(degenerate.values()))}: a wrong model "
                              f"would pass them; give example inputs that make it vary, or allow_degenerate_golden "
                              f"(--allow-degenerate-golden) to export anyway")
        for what in degenerate.values():
            log.warning("golden cases cannot check %s", what)
        spec["golden"] = {"location": "package", "record": GOLDEN_RECORD, "count": len(cases),
                          "names": [c.name for c in cases], "tolerances": _tolerance_table(cases, golden.tolerances)}
        if degenerate:
            spec["golden"]["degenerate_outputs"] = sorted(degenerate)
        if left_out:
            spec["golden"]["left_out"] = [name for name, _ in left_out]

    out_dir = path.parent.resolve()
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.stem}.", dir=out_dir))
    try:
        final = tmp / "final" / path.name   # same file name: the archive's root folder is named after it
        final.parent.mkdir()
        compiled = []
        for name in plan.variants:
            out = tmp / name / path.name
            out.parent.mkdir()
            with _stage(f"compile ({name})"):
                compiled.append((*_compile(ep, out, name, plan.optimize, device), out))
            if compiled[-1][1] == "avx2" and not {"avx512", "avx2", "default"} & set(plan.variants):
                log.warning("the %s variant's weights are packed for oneDNN's AVX2 code, so CPUs with AVX-512 will "
                            "not load this package: add a portable variant for them (cpu_isa %s,avx2)", name, name)
            from . import passes
            problem = _constants_problem(name, _library_bytes(out), weights_bytes(model),
                                         passes.last_constants if device == "cpu" else [])
            if problem:
                log.warning("%s", problem)
                warnings.warn(problem, stacklevel=2)
        lite_compiled = []
        for name in plan.variants if plan.lite else ():
            with _stage(f"compile ({name}, lite)"):
                lite_compiled.append(_compile_lite(ep, tmp / f"{name}-lite" / path.name, name, plan.optimize,
                                                   tuple(lite_ops.values())))
        with _stage("package"):
            _finish_package(compiled, final, spec, _golden.dumps(cases), lite_compiled)
        with _stage("verify"):
            report = verify_package(final, golden.tolerances)
            foreign = [v["isa"] for v in spec["variants"] if v["arch"] != cpu.host_arch()]
            if foreign:
                log.warning("variants %s are for another arch: not verified here; run `pt2run verify` on the target",
                            ", ".join(foreign))
            if not report and not foreign:
                lacking = "; ".join(f"{v['isa']} needs {', '.join(cpu.runs_here(v['arch'], v['cpu_features']))}"
                                    for v in spec["variants"])
                raise ExportError(f"none of the package's CPU variants runs on this machine, so it cannot be verified "
                                  f"before it is written ({lacking}); add one that does, e.g. cpu_isa native")
            if lite_compiled:
                report += _verify_lite(lite_compiled, cases, spec, golden.tolerances, tuple(lite_ops.values()))
            failed = [r for r in report if not r["passed"]]
            if failed:
                f = failed[0]
                hint = ""
                if _golden.NONFINITE_HINT in f["reason"] and f["name"] != "example" and not f["name"].startswith("given_"):
                    hint = ("; the inputs of this case were generated, and a model that gives NaN or inf on them "
                            "usually is not meant for such inputs (a mask that pads a whole row): give cases of "
                            "your own with golden_inputs= (--golden-inputs FILE.pt)")
                raise ExportError(f"the compiled package does not reproduce the eager model: variant {f['variant']}, "
                                  f"case {f['name']}: {f['reason']} ({len(failed)} of {len(report)} cases failed)"
                                  + hint)
        os.replace(final, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    here = sorted({r["variant"] for r in report})
    log.info("wrote %s (%d golden cases; verified here for %s)", path, len(cases), ", ".join(here) or "no variant")
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
    return list(example_inputs)


def _check_golden_inputs(golden_inputs, example: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    if isinstance(golden_inputs, torch.Tensor) or not isinstance(golden_inputs, (tuple, list)):
        raise ExportError(f"expected golden_inputs as a list of input tuples, got {type(golden_inputs).__name__}")
    cases = []
    for c, case in enumerate(golden_inputs):
        case = [case] if isinstance(case, torch.Tensor) else case
        if not isinstance(case, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in case):
            raise ExportError(f"golden_inputs[{c}]: expected a tuple of tensors like the example inputs")
        if len(case) != len(example):
            raise ExportError(f"golden_inputs[{c}]: expected {len(example)} inputs like the example's, got {len(case)}")
        for i, (t, e) in enumerate(zip(case, example)):
            if t.dtype != e.dtype or t.dim() != e.dim():
                raise ExportError(f"golden_inputs[{c}] input {i}: expected {e.dtype} with {e.dim()} dims like the "
                                  f"example's, got {t.dtype} with {t.dim()} dims")
        cases.append([t.detach() for t in case])
    return cases


def _check_given_shapes(given: list[list[torch.Tensor]], spec_inputs: list[dict], example: list[torch.Tensor]):
    """Each given case's shapes within what the package takes: static dims the example's, dynamic ones in range and
    consistent (one size per name)."""
    for c, case in enumerate(given):
        sizes: dict[str, int] = {}
        for i, (t, entry) in enumerate(zip(case, spec_inputs)):
            where = f"golden_inputs[{c}] input {i} ({entry['name']})"
            dynamic_dims = {dd["dim"]: dd for dd in entry["dynamic_dims"]}
            for d, size in enumerate(t.shape):
                dd = dynamic_dims.get(d)
                if dd is None:
                    if size != example[i].shape[d]:
                        raise ExportError(f"{where}: dim {d} is static ({example[i].shape[d]}), got {size}")
                    continue
                hi = dd.get("max")
                if size < dd.get("min", 0) or (hi is not None and size > hi):
                    raise ExportError(f"{where}: dim {d} ({dd['name']}) must be in {dd.get('min', 0)}.."
                                      f"{'inf' if hi is None else hi}, got {size}")
                name, value = dd["name"], size
                if "of" in dd:
                    if (size - dd["offset"]) % dd["scale"]:
                        raise ExportError(f"{where}: dim {d} must be {dd['name']} for a whole {dd['of']}, got {size}")
                    name, value = dd["of"], (size - dd["offset"]) // dd["scale"]
                if sizes.setdefault(name, value) != value:
                    raise ExportError(f"{where}: dim {d} makes {name} = {value}, but an earlier input has "
                                      f"{name} = {sizes[name]}")


def export_program(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], *,
                   dynamic_batch: tuple[int, int] | None = None,
                   dynamic_shapes: Any = None) -> torch.export.ExportedProgram:
    """The program torch.export makes of `model` with export_package's dynamic dims and errors, before the passes
    and the compile (what `export-tools graph` prints)."""
    inputs = [example_inputs] if isinstance(example_inputs, torch.Tensor) else list(example_inputs)
    dims = dynamic.normalize(model, inputs, dynamic_batch, dynamic_shapes)
    was_training = model.training
    try:
        return _export(model.eval(), inputs, dims)
    finally:
        model.train(was_training)


def _export(model, inputs, dims) -> torch.export.ExportedProgram:
    """torch.export with the dims of dynamic.normalize (None: static)."""
    try:
        return torch.export.export(model, tuple(dynamic.trace_inputs(inputs, dims)),
                                   dynamic_shapes=dynamic.for_torch(dims), strict=False)
    except Exception as e:
        raise ExportError(_export_failure(e, dims, model)) from e


def _export_failure(err: Exception, dims, model: torch.nn.Module | None = None) -> str:
    """torch.export's error in one line that names the user's dims; its advice about mark_dynamic and Dim.DYNAMIC
    (which the user never used) replaced by what to change here."""
    import re

    what = ""
    if dims is not None:
        ranges = {}
        for entry in dims:
            for dim in entry.values():
                name = getattr(dim, "__name__", "auto")
                ranges.setdefault(name, f"{name} {getattr(dim, 'min', '?')}:{dynamic.bound(getattr(dim, 'max', None))}")
        what = f"with dynamic dims {', '.join(ranges[k] for k in sorted(ranges))}"
    text = str(err)
    fixed = re.search(r"You marked (\w+) as dynamic but your code specialized it to be a constant \((\d+)\)", text)
    if fixed:
        rnns = sorted({type(m).__name__ for m in (model.modules() if model is not None else ())
                       if isinstance(m, torch.nn.RNNBase)})
        if rnns:
            return (f"torch.export failed {what}: it fixes {fixed[1]} at {fixed[2]}, the example's size. The model "
                    f"has {', '.join(rnns)}: torch.export specializes the sequence length of torch's RNN modules "
                    f"(torch's limit, not your model's). Leave {fixed[1]} static at the longest length you serve "
                    f"and pad shorter inputs, or export one package per length")
        return (f"torch.export failed {what}: the model only runs {fixed[1]} = {fixed[2]} (torch.export specialized "
                f"it to a constant); leave {fixed[1]} static, or change the model so that it runs other sizes")
    multiples = dynamic.suggested_multiples(text)
    if multiples and dims is not None:
        # torch's suggested fix, in the CLI's syntax and Python's, instead of its guard expressions
        names = dynamic.input_names(model, len(dims)) if model is not None else [str(i) for i in range(len(dims))]
        cli, python = [], []
        for name, (scale, lo, hi) in sorted(multiples.items()):
            for i, entry in enumerate(dims):
                for d, dim in sorted(entry.items()):
                    if getattr(dim, "__name__", None) == name:
                        cli.append(f"--dynamic {names[i]}.{d}={scale}*{name}:{scale * lo}:{scale * hi}")
            python.append(f"{name} = {scale} * Dim(\"{name}\", min={lo}, max={hi})")
        return (f"torch.export failed {what}: the model runs only sizes that are multiples: "
                f"{', '.join(f'{n} must be {s} * a size in {lo}..{hi}' for n, (s, lo, hi) in sorted(multiples.items()))}"
                f". Export with {' '.join(cli) or 'those dims'} (Python: {'; '.join(python)})")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = next((line[2:] for line in lines if line.startswith("- ")), "")  # the first violated constraint
    detail = first_line(err) + (f" {reason}" if reason else "")
    return f"torch.export failed {what}: {detail}".replace("  ", " ")


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
    return libraries.provider_of(namespace).name


def _dims(t: torch.Tensor, ep: torch.export.ExportedProgram, names: dict, is_input: bool
          ) -> tuple[list[int], list[dict]]:
    shape, dyn = [], []
    for d, size in enumerate(t.shape):
        if isinstance(size, int):
            shape.append(size)
            continue
        entry = dynamic.describe(size.node.expr, names, ep, is_input)
        shape.append(-1)
        dyn.append({"dim": d, **entry})
    return shape, dyn


# ops that read a table at positions an integer tensor gives: (index argument, table argument, table dim, whether
# negative positions count from the end)
_INDEXING = {"aten.embedding.default": (1, 0, 0, False), "aten.index_select.default": (2, 0, None, False)}
# ops through which an input's values pass unchanged (views, copies, integer conversions)
_SAME_VALUES = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.unsqueeze.default",
                "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.flatten.using_ints",
                "aten.clone.default", "aten.contiguous.default", "aten.expand.default", "aten.permute.default",
                "aten.transpose.int", "aten.t.default", "aten._to_copy.default", "aten.to.dtype",
                "aten.alias.default", "aten.detach.default"}
# (not a slice or select: every element of the input is checked, and the rest of it may hold other things)


def _value_ranges(ep) -> dict[str, dict[str, Any]]:
    """The user inputs whose values index a table (an embedding's token ids): input name -> {min, max, indexes}.
    The generated code checks each index inside a parallel loop, where a failed check aborts the process; a runtime
    checks these ranges before it runs the model instead."""
    user = set(ep.graph_signature.user_inputs)
    ranges: dict[str, dict[str, Any]] = {}
    for node in ep.graph.nodes:
        entry = _INDEXING.get(str(node.target))
        if node.op != "call_function" or entry is None:
            continue
        index_arg, table_arg, table_dim, _ = entry
        if len(node.args) <= max(index_arg, table_arg):
            continue
        dim = table_dim if table_dim is not None else node.args[1]
        table = node.args[table_arg].meta.get("val") if hasattr(node.args[table_arg], "meta") else None
        src = node.args[index_arg]
        while hasattr(src, "op") and src.op == "call_function" and str(src.target) in _SAME_VALUES and src.args:
            if str(src.target) in ("aten._to_copy.default", "aten.to.dtype") and not _widening(src):
                break  # a float, or a narrower integer that wraps: the input's values are not the indices
            src = src.args[0]
        if table is None or not hasattr(src, "op") or src.op != "placeholder" or src.name not in user:
            continue
        rows = table.shape[dim if dim >= 0 else dim + table.dim()]
        if not isinstance(rows, int) or not _integer(src.meta.get("val")):
            continue
        what = f"{node.target.overloadpacket.__name__ if hasattr(node.target, 'overloadpacket') else node.target}"
        new = {"min": 0, "max": rows - 1, "indexes": f"aten.{what} of {rows} rows"}
        old = ranges.get(src.name)
        if old is None or new["max"] < old["max"]:
            ranges[src.name] = new
    return ranges


def _widening(node) -> bool:
    """An integer conversion that keeps every value of its integer input (int32 -> int64)."""
    out, src = node.meta.get("val"), node.args[0].meta.get("val") if hasattr(node.args[0], "meta") else None
    return _integer(out) and _integer(src) and torch.iinfo(out.dtype).bits >= torch.iinfo(src.dtype).bits and \
        (out.dtype.is_signed or not src.dtype.is_signed)


def _integer(val) -> bool:
    return isinstance(val, torch.Tensor) and not val.dtype.is_floating_point and not val.dtype.is_complex \
        and val.dtype != torch.bool


def _spec(ep, path: Path, device, dims, used, metadata, n_outputs) -> dict[str, Any]:
    names = dynamic.symbol_names(ep, dims)
    sig = ep.graph_signature
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    inputs = []
    values = _value_ranges(ep)
    for name in sig.user_inputs:
        val = placeholders[name].meta["val"]
        shape, dyn = _dims(val, ep, names, True)
        inputs.append({"name": name, "dtype": _golden.dtype_name(val.dtype), "shape": shape, "dynamic_dims": dyn,
                       **({"values": values[name]} if name in values else {})})
    output_node = next(n for n in ep.graph.nodes if n.op == "output")
    outputs = []
    for i, node in enumerate(output_node.args[0][:n_outputs]):
        val = node.meta["val"]
        shape, dyn = _dims(val, ep, names, False)
        outputs.append({"name": f"output_{i}", "dtype": _golden.dtype_name(val.dtype), "shape": shape,
                        "dynamic_dims": dyn})
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
        rtol, atol, atol_rel = (tuple((overrides or {}).get(_golden.dtype_name(dt), _golden.tolerance_for(dt))) +
                                (None,))[:3]
        table[_golden.dtype_name(dt)] = {"rtol": rtol, "atol": atol,
                                         **({"atol_rel": atol_rel} if atol_rel is not None else {})}
    return table


OPTIMIZE = ("fold", "none")

# A model library may hold its weights once, packed or padded (x 1.5), beside its code (10 MB): past that, a constant
# is held several times - an unrolled loop over one weight packed per step made a 217 MB package of 19 MB of weights.
CONSTANTS_FACTOR, CONSTANTS_SLACK_BYTES = 1.5, 10 * 2**20


def weights_bytes(model: torch.nn.Module) -> int:
    """The bytes of the model's parameters and buffers, each storage once."""
    seen: dict[int, int] = {}
    for t in [*model.parameters(), *model.buffers()]:
        if t.device.type != "meta":
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def _library_bytes(package: Path) -> int:
    """The size of the compiled model libraries in a package (its constants are inside them)."""
    import zipfile
    with zipfile.ZipFile(package) as z:
        return sum(i.file_size for i in z.infolist() if i.filename.endswith(".so"))


def _constants_problem(variant: str, library_bytes: int, weights: int,
                       constants: list[tuple[tuple[int, ...], str, int]]) -> str:
    """'' when a variant's model library is within the bound; else one line saying by how much it is past it and
    which constants repeat (by shape: the census of the frozen graph, passes.last_constants)."""
    if library_bytes <= CONSTANTS_FACTOR * weights + CONSTANTS_SLACK_BYTES:
        return ""
    groups: dict[tuple, list[int]] = {}
    for shape, dtype, nbytes in constants:
        groups.setdefault((shape, dtype), []).append(nbytes)
    repeated = sorted(((sum(b), len(b), key) for key, b in groups.items() if len(b) > 1), reverse=True)
    what = (f"; most of it {repeated[0][1]} constants of shape {list(repeated[0][2][0])} {repeated[0][2][1]} "
            f"({repeated[0][0] / 1e6:.1f} MB): one weight held once per use, as an unrolled loop would"
            if repeated else "")
    return (f"the {variant} model library is {library_bytes / 1e6:.1f} MB for {weights / 1e6:.1f} MB of parameters "
            f"and buffers (expected at most {CONSTANTS_FACTOR}x + {CONSTANTS_SLACK_BYTES // 2**20} MB){what}")

# Inductor's own parallel loops take their thread count from the process that runs the package (set_num_threads,
# --intra-op-threads), not from the one that exported it: by default it writes the exporting process's count into
# the code (num_threads(N)), and sizes a parallel reduction's per-thread partial results by it even where the team
# comes from the runtime's setting - a package exported on 2 cores then wrote past those arrays on a bigger host.
PARALLEL_LOOPS = {"cpp.dynamic_threads": True}


def _compile(ep, out: Path, name: str, optimize: str, device: str) -> tuple[cpu.Variant, str | None]:
    """One CPU variant into its own package file, and the oneDNN class its packed weights are for (None: none). Each compile gets a fresh inductor cache: with a shared one, a
    later compile of the same graph can be handed an earlier compile's generated code. A variant for another arch:
    inductor's C++ only, built by the cross compiler (export_tools.cross). optimize (export_package's): inductor
    freezes only with gradients off; export_tools.passes adds its settings to CPU compiles, oneDNN's packed
    weights where they are safe and faster (passes.weight_packing)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import fresh_cache

    from . import cross, passes

    packed_for = None
    try:
        freeze = optimize == "fold"
        with cpu.compiling(name) as variant, fresh_cache(), torch.no_grad() if freeze else contextlib.nullcontext(), \
                passes.weight_packing(variant if device == "cpu" and freeze else None) as packing, \
                inductor_config.patch({"freezing": freeze, **packing, **PARALLEL_LOOPS,
                                       **(passes.cpu_inductor_config() if device == "cpu" else {})}):
            passes.packed_weights(reset=True)
            if variant.arch == cpu.host_arch():
                torch._inductor.aoti_compile_and_package(ep, package_path=str(out))
            else:
                target = f"linux-{variant.arch}"
                tc = cross.toolchain(target)
                sources = out.with_name(out.stem + ".cpp-only.pt2")
                with inductor_config.patch({"aot_inductor.package_cpp_only": True,
                                            "aot_inductor.precompile_headers": False}):
                    torch._inductor.aoti_compile_and_package(ep, package_path=str(sources))
                cross.finish(sources, out, tc, variant.arch, variant.flags)
            if packing["cpp.weight_prepack"] and passes.packed_weights():
                packed_for = passes.packing_class(variant)
    except (CpuVariantError, TargetTorchError):  # the cross tools: their own message says what is missing
        raise
    except Exception as e:
        raise ExportError(f"aoti_compile_and_package failed for cpu_isa {name}: {first_line(e)}") from e
    return variant, packed_for


def _compile_lite(ep, out: Path, name: str, optimize: str, custom_ops: tuple[_lite.CustomOp, ...] = ()
                  ) -> tuple[cpu.Variant, _lite.Library]:
    """One lite variant (export_tools.lite): inductor's C++ with libtorch left out, built here."""
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import fresh_cache

    out.parent.mkdir(parents=True)
    freeze = optimize == "fold"
    try:
        with cpu.compiling(name) as variant, fresh_cache(), torch.no_grad() if freeze else contextlib.nullcontext(), \
                inductor_config.patch({"freezing": freeze, "conv_1x1_as_mm": True, **PARALLEL_LOOPS}), \
                _lite.compiling(custom_ops):
            torch._inductor.aoti_compile_and_package(ep, package_path=str(out))
    except Exception as e:
        raise ExportError(f"aoti_compile_and_package failed for the lite {name} variant: {first_line(e)}") from e
    target = None if variant.arch == cpu.host_arch() else f"linux-{variant.arch}"
    return variant, _lite.library_from_cpp_package(out, target, tuple(variant.flags), custom_ops)


def _verify_lite(lite_compiled, cases, spec, tolerances, custom_ops=()) -> list[dict[str, Any]]:
    """The golden cases through each lite variant this machine runs, with the lite runtime's shim."""
    runtime = _lite.find_runtime()
    if runtime is None:
        raise _lite.LiteError(f"export checks lite variants with {_lite.LIBRARY_NAME}, which was not found (build it: "
                              f"make build, or set {_lite.ENV_VAR})")
    table = {k: (v["rtol"], v["atol"], v.get("atol_rel")) for k, v in spec["golden"]["tolerances"].items()}
    table.update(tolerances or {})
    degenerate = set(spec["golden"].get("degenerate_outputs", ()))
    report = []
    for variant, library in lite_compiled:
        if cpu.runs_here(variant.arch, variant.cpu_features):
            continue
        runner = _lite.Runner(library.data, runtime, tuple(op.library for op in custom_ops))
        try:
            for case in cases:
                actual = runner(*case.inputs)
                passed, max_abs, max_scaled, reason = _golden.compare(actual, case.outputs, table, degenerate)
                report.append({"variant": f"{variant.name} (lite)", "name": case.name, "passed": passed,
                               "max_abs_error": max_abs, "max_scaled_error": max_scaled, "reason": reason})
        finally:
            runner.close()
    return report


def _variant_model_name(index: int, name: str) -> str:
    # The first variant keeps AOTInductor's default name, so torch's own loaders find it. No name may begin with
    # another: torch 2.11's loader takes the files of every folder whose path contains the one asked for.
    return "model" if index == 0 else f"{name}_model"


def _finish_package(compiled: list[tuple[cpu.Variant, str | None, Path]], final: Path, spec: dict[str, Any],
                    golden_bytes: bytes, lite_compiled: list[tuple[cpu.Variant, _lite.Library]] = ()) -> None:
    """One archive from the variants' packages: each variant's model folder under its own model name, the shared
    records once (they must agree), the spec with every variant's library SHA-256 in every model's metadata, and
    the golden cases; a variant with packed weights names the oneDNN class they are for (packed_for)."""
    from torch.export.pt2_archive._package import PT2ArchiveReader

    records: dict[str, bytes] = {}
    spec["variants"] = []
    for index, (variant, packed_for, package) in enumerate(compiled):
        model_name = _variant_model_name(index, variant.name)
        with PT2ArchiveReader(str(package)) as reader:
            names = [n for n in reader.get_file_names() if n != ".data/serialization_id"]  # the writer makes its own
            own = model_dir("model")
            libs = [n for n in names if n.startswith(own) and n.endswith(".so")]
            if len(libs) != 1:
                raise ExportError(f"expected one compiled model library in the {variant.name} compile, found {libs}")
            for n in names:
                if n.endswith(".cpp"):
                    continue  # inductor's generated sources: loading needs the compiled library only
                data = reader.read_bytes(n)
                if n == libs[0]:
                    # a cross-built library was stripped by its own toolchain's objcopy
                    data = lib_bytes = (_strip_debug_info(data, variant.name) if variant.arch == cpu.host_arch()
                                        else data)
                if n.startswith(own):
                    records[model_dir(model_name) + n[len(own):]] = data
                elif n.startswith(MODELS_DIR):
                    raise ExportError(f"unexpected record {n} in the {variant.name} compile")
                elif records.setdefault(n, data) != data:
                    raise ExportError(f"the {variant.name} compile's {n} differs from the first compile's")
        library_record = model_dir(model_name) + libs[0][len(own):]
        records.update(compat.loader_records(library_record))
        spec["variants"].append({
            "isa": variant.name, "model": model_name, "arch": variant.arch, "vec_isa": variant.vec_isa,
            "compile_flags": list(variant.flags), "cpu_features": list(variant.cpu_features),
            "record": library_record,
            "sha256": hashlib.sha256(lib_bytes).hexdigest(), "size": len(lib_bytes),
            **({"packed_for": packed_for} if packed_for else {}),
        })
    if lite_compiled:
        # a key of its own: runtimes that know no lite variants pass over it
        spec["lite_variants"] = []
        for variant, library in lite_compiled:
            record = f"{_lite.RECORD_DIR}{variant.name}.so"
            records[record] = library.data
            spec["lite_variants"].append({
                "isa": variant.name, "arch": variant.arch, "vec_isa": variant.vec_isa,
                "compile_flags": list(variant.flags), "cpu_features": list(variant.cpu_features), "record": record,
                "sha256": hashlib.sha256(library.data).hexdigest(), "size": len(library.data),
                "shim": list(library.shim), "needed": list(library.needed),
            })
    _write_archive(final, records, spec, golden_bytes)


def _strip_debug_info(library: bytes, variant: str) -> bytes:
    """The model library without its DWARF sections (about two thirds of a small model's library; loading and
    running do not read them), by binutils' objcopy where there is one."""
    import subprocess

    objcopy = shutil.which("objcopy")
    if objcopy is None:
        log.warning("no objcopy on PATH: the %s model library keeps its debug info", variant)
        return library
    with tempfile.TemporaryDirectory(prefix="pt2rt-strip-") as tmp:
        src, dst = Path(tmp) / "in.so", Path(tmp) / "out.so"
        src.write_bytes(library)
        result = subprocess.run([objcopy, "--strip-debug", str(src), str(dst)], capture_output=True, text=True)
        if result.returncode != 0:
            raise ExportError(f"objcopy --strip-debug failed on the {variant} model library: "
                              f"{(result.stderr.strip().splitlines() or ['?'])[0]}")
        return dst.read_bytes()


def _write_archive(final: Path, records: dict[str, bytes], spec: dict[str, Any], golden_bytes: bytes) -> None:
    from torch.export.pt2_archive._package import PT2ArchiveWriter

    with PT2ArchiveWriter(str(final)) as writer:
        for name, data in records.items():
            if name.startswith(MODELS_DIR) and name.endswith("_metadata.json"):
                md = json.loads(data)
                md[SPEC_KEY] = json.dumps(spec)
                data = json.dumps(md).encode()
            writer.write_bytes(name, data)
        writer.write_bytes(GOLDEN_RECORD, golden_bytes)
