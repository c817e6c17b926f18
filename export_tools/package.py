"""A package as a reader sees it: reading, loading, verifying and comparing a package in Python (its layout:
export_tools.layout). export.py writes packages; this module only reads them (the C++ reader is
runtime/src/package.cpp)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import torch

from . import compat, cpu, libraries, passes, recurrent
from . import golden as _golden
from .errors import ExportError, first_line
from .layout import GOLDEN_RECORD, MODELS_DIR, SPEC_FORMAT, SPEC_KEY


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    """A model's output (a tensor or a tuple/list of them) as a list; ExportError naming anything else."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for i, t in enumerate(outs):
        if not isinstance(t, torch.Tensor):
            raise ExportError(f"expected the model to return a tensor or a tuple of tensors; output {i} is "
                              f"{type(t).__name__}")
    return outs


def read_spec(package_path: str | os.PathLike) -> dict[str, Any]:
    """The spec of a package, read from the archive without loading anything."""
    import zipfile

    path = Path(package_path)
    if not path.is_file():
        raise ExportError(f"{path} is not a file")
    try:
        with zipfile.ZipFile(path) as zf:
            records = [n for n in zf.namelist() if f"/{MODELS_DIR}" in n and n.endswith("_metadata.json")]
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


def package_sizes(package_path: str | os.PathLike) -> dict[str, int]:
    """Bytes of the package by what they are: each variant's model library, the golden cases, constants and custom
    objects, everything else (metadata, AOTInductor's small records); plus the file's total."""
    import zipfile

    spec = read_spec(package_path)
    libraries = {v["record"]: f"model library ({v['isa']})" for v in spec["variants"]}
    sizes: dict[str, int] = {}
    with zipfile.ZipFile(package_path) as zf:
        for info in zf.infolist():
            name = info.filename.split("/", 1)[1] if "/" in info.filename else info.filename
            if name in libraries:
                what = libraries[name]
            elif name == spec["golden"]["record"]:
                what = "golden cases"
            elif name.startswith(("data/constants/", "data/weights/")):
                what = "constants and custom objects"
            else:
                what = "metadata and other records"
            sizes[what] = sizes.get(what, 0) + info.compress_size
    sizes["total (file)"] = Path(package_path).stat().st_size
    return sizes


def read_golden(package_path: str | os.PathLike) -> list[_golden.Case]:
    """The package's golden cases (inputs and the eager model's outputs)."""
    from torch.export.pt2_archive._package import PT2ArchiveReader

    with PT2ArchiveReader(str(package_path)) as reader:
        return _golden.loads(reader.read_bytes(GOLDEN_RECORD))


def _why_not_here(spec: dict[str, Any], variant: dict[str, Any]) -> str:
    """Why this machine cannot run `variant` ("" when it can): CPU features it lacks, or weights packed for another
    oneDNN class than this machine's (each call a reference kernel; pt2rt's why_variant_cannot_run)."""
    if spec["device"] != "cpu":
        return ""
    lacking = cpu.runs_here(variant["arch"], variant["cpu_features"])
    if lacking:
        return f"needs {', '.join(lacking)}, which this machine lacks"
    here = passes.onednn_class()
    if variant.get("packed_for") not in (None, here):
        return (f"has weights packed for oneDNN's {variant['packed_for']} code, and oneDNN runs its "
                f"{here or 'baseline'} code here")
    return ""


def select_variant(spec: dict[str, Any], cpu_isa: str | None = None) -> dict[str, Any]:
    """The variant pt2rt would load here: `cpu_isa` if given, else the most specialised one this machine runs."""
    by_isa = {v["isa"]: v for v in spec["variants"]}
    if cpu_isa is not None:
        if cpu_isa not in by_isa:
            raise ExportError(f"the package has no CPU variant {cpu_isa} (it has: {', '.join(by_isa)})")
        why = _why_not_here(spec, by_isa[cpu_isa])
        if why:
            raise ExportError(f"CPU variant {cpu_isa} {why}")
        return by_isa[cpu_isa]
    runnable = [v for v in spec["variants"] if not _why_not_here(spec, v)]
    if not runnable:
        raise ExportError(f"no CPU variant of the package runs on this machine (it has: {', '.join(by_isa)})")
    return max(runnable, key=lambda v: len(v["cpu_features"]))


def load_package(package_path: str | os.PathLike, cpu_isa: str | None = None):
    """The package's best variant for this machine (or `cpu_isa`), loaded in Python - a callable like
    torch._inductor.aoti_load_package's, which loads every variant, also ones this CPU cannot execute."""
    from torch.export.pt2_archive._package import AOTICompiledModel

    spec = read_spec(package_path)
    recurrent.load_for(spec)
    why = compat.why_not_loadable(spec["torch_version"])
    if why:
        raise ExportError(f"{package_path}: {why}")
    variant = select_variant(spec, cpu_isa)
    return AOTICompiledModel(torch._C._aoti.AOTIModelPackageLoader(str(package_path), variant["model"], False, 1, -1))


def verify_package(package_path: str | os.PathLike,
                   tolerances: dict[str, tuple] | None = None) -> list[dict[str, Any]]:
    """Run each CPU variant that this machine can execute (a CUDA package's one) on the golden cases in Python;
    one report entry per variant and case. Variants this CPU cannot run are left out."""
    spec = read_spec(package_path)
    recurrent.load_for(spec)
    libraries.check_registered(spec)
    table = {k: (v["rtol"], v["atol"], v.get("atol_rel")) for k, v in spec["golden"]["tolerances"].items()}
    table.update(tolerances or {})
    cases = read_golden(package_path)
    report = []
    for variant in spec["variants"]:
        if _why_not_here(spec, variant):
            continue
        runner = load_package(package_path, variant["isa"])
        for case in cases:
            args = [t.to(spec["device"]) for t in case.inputs]
            with torch.no_grad():
                actual = flatten_outputs(runner(*args))
            passed, max_abs, max_scaled, reason = _golden.compare(
                actual, case.outputs, table, set(spec["golden"].get("degenerate_outputs", ())))
            report.append({"variant": variant["isa"], "name": case.name, "passed": passed, "max_abs_error": max_abs,
                           "max_scaled_error": max_scaled, "reason": reason})
    return report


def compare_package(package_path: str | os.PathLike, model: torch.nn.Module,
                    cases: Sequence[Sequence[torch.Tensor]]) -> list[dict[str, Any]]:
    """The package (each CPU variant this machine runs; a CUDA package's one) against the eager `model` on the same
    inputs: one entry per variant, case and output, with the max abs error, the max error relative to the output's
    magnitude, and whether it is within the package's golden tolerances."""
    spec = read_spec(package_path)
    recurrent.load_for(spec)
    libraries.check_registered(spec)
    table = {k: (v["rtol"], v["atol"], v.get("atol_rel")) for k, v in spec["golden"]["tolerances"].items()}
    degenerate = set(spec["golden"].get("degenerate_outputs", ()))
    names = [i["name"] for i in spec["inputs"]]
    model = model.eval()
    expected = []
    for index, inputs in enumerate(cases):
        if len(inputs) != len(names):
            raise ExportError(f"case {index}: {len(inputs)} inputs, the package takes {len(names)} "
                              f"({', '.join(names)})")
        try:
            with torch.no_grad():
                expected.append([t.detach().cpu().clone() for t in flatten_outputs(model(*inputs))])
        except Exception as e:
            raise ExportError(f"case {index}: the eager model failed: {first_line(e)}") from e
    report = []
    for variant in spec["variants"]:
        if _why_not_here(spec, variant):
            continue
        runner = load_package(package_path, variant["isa"])
        for index, (inputs, eager) in enumerate(zip(cases, expected)):
            try:
                with torch.no_grad():
                    actual = flatten_outputs(runner(*[t.to(spec["device"]) for t in inputs]))
            except Exception as e:
                raise ExportError(f"case {index}: the package ({variant['isa']}) did not run: {first_line(e)}") from e
            if len(actual) != len(eager):
                raise ExportError(f"case {index}: the package gives {len(actual)} outputs, the model {len(eager)}")
            for i, (a, e) in enumerate(zip(actual, eager)):
                passed, max_abs, max_scaled, reason = _golden.compare([a], [e], table,
                                                                      {0} if i in degenerate else set())
                report.append({"variant": variant["isa"], "case": index, "output": i, "shape": list(e.shape),
                               "dtype": _golden.dtype_name(e.dtype), "passed": passed, "max_abs_error": max_abs,
                               "max_scaled_error": max_scaled, "reason": reason.removeprefix("output 0: ")})
    return report
