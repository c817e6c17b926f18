"""export-tools: export PyTorch models that use custom C++/CUDA ops into self-describing model.pt2 packages.

Exit codes: 0 ok, 1 the package failed its golden check (verify), 2 bad input (named in one line).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import traceback
from pathlib import Path

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _dynamic_batch(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX (e.g. 1:32), got {text!r}") from None
    return lo, hi


def _cpu_isa(text: str) -> list[str]:
    from .cpu import parse_names
    from .errors import CpuVariantError
    try:
        return parse_names(text)
    except CpuVariantError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _targets(text: str) -> list[str]:
    from .cpu import parse_targets
    from .errors import CpuVariantError
    try:
        return parse_targets(text)
    except CpuVariantError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _golden_inputs(path: Path | None) -> list:
    if path is None:
        return []
    import torch
    try:
        cases = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise UsageError(f"--golden-inputs {path}: no such file") from None
    except Exception as e:
        from .errors import first_line
        raise UsageError(f"--golden-inputs {path}: not a file torch.load reads ({type(e).__name__}: "
                         f"{first_line(e)})") from None
    if not isinstance(cases, (list, tuple)):
        raise UsageError(f"--golden-inputs {path}: expected torch.save of a list of input tuples, got "
                         f"{type(cases).__name__}")
    return list(cases)


def _load_factory(spec: str):
    """MODULE:FACTORY -> FACTORY() -> (model, example_inputs)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected --model MODULE:FACTORY, got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")  # modules in the current directory, as `python -m` allows
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"cannot import module {module_name!r}: {e}") from e
    except Exception as e:  # e.g. an ops package whose library is missing
        raise UsageError(f"importing module {module_name!r} failed: {type(e).__name__}: {e}") from e
    factory = getattr(module, attr, None)
    if factory is None:
        raise UsageError(f"module {module_name!r} has no attribute {attr!r}")
    if not callable(factory):
        raise UsageError(f"{spec} is not callable; expected a factory returning (model, example_inputs)")
    try:
        result = factory()
    except Exception as e:
        raise UsageError(f"{spec}() failed: {type(e).__name__}: {e}") from e
    if not (isinstance(result, tuple) and len(result) == 2):
        raise UsageError(f"{spec}() must return (model, example_inputs), got {type(result).__name__}")
    import torch
    model, inputs = result
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"{spec}() returned a {type(model).__name__} as the model; expected a torch.nn.Module")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)) or not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise UsageError(f"{spec}() returned example inputs of type {type(inputs).__name__}; expected a tuple of tensors")
    return model, tuple(inputs)


def _load_ops_libraries(args) -> None:
    from .libraries import load_ops_library
    for path in args.ops_library or []:
        load_ops_library(path)


def _dynamic_shapes(args, model, inputs):
    """--dynamic items -> dynamic_shapes keyed by input name (None without any)."""
    from .dynamic import DynamicShapesError, input_names, parse_cli
    if not args.dynamic:
        return None
    try:
        return parse_cli(args.dynamic, input_names(model, len(inputs)))
    except DynamicShapesError as e:
        raise UsageError(str(e)) from None


def _cmd_export(args) -> int:
    from .export import export_package
    _load_ops_libraries(args)
    model, inputs = _load_factory(args.model)
    metadata = dict(kv.split("=", 1) for kv in args.metadata) if args.metadata else None
    export_package(model, inputs, args.out, dynamic_batch=args.dynamic_batch,
                   dynamic_shapes=_dynamic_shapes(args, model, inputs), golden=args.golden,
                   cpu_isa=args.cpu_isa, target=args.target, device=args.device, metadata=metadata,
                   allow_degenerate_golden=args.allow_degenerate_golden, golden_max_mb=args.golden_max_mb,
                   golden_inputs=_golden_inputs(args.golden_inputs), optimize=args.optimize, lite=args.lite)
    print(args.out)
    return EXIT_OK


def _cmd_graph(args) -> int:
    from .dynamic import DynamicShapesError
    from .export import export_program
    _load_ops_libraries(args)
    model, inputs = _load_factory(args.model)
    try:
        ep = export_program(model, inputs, dynamic_batch=args.dynamic_batch,
                            dynamic_shapes=_dynamic_shapes(args, model, inputs))
    except DynamicShapesError as e:
        raise UsageError(str(e)) from None
    print(ep.graph_module.print_readable(print_output=False) if args.readable else ep.graph)
    return EXIT_OK


def _format_spec(spec: dict) -> str:
    def shape(entry):
        dims = [str(s) for s in entry["shape"]]
        for d in entry["dynamic_dims"]:
            rng = f"{d.get('min')}..{d.get('max')}"
            dims[d["dim"]] = f"{d['name']}[{rng}]"
        return f"{entry['dtype']}[{', '.join(dims)}]"

    lines = [f"package      {spec['model']}  ({spec['format']}, {spec['created_by']})",
             f"device       {spec['device']}" + (f"  (CUDA {spec['cuda']['version']}, sm {spec['cuda']['compute_capability']})"
                                                 if spec.get("cuda") else ""),
             f"torch        {spec['torch_version']}"]
    lines += [f"input        {e['name']}: {shape(e)}" for e in spec["inputs"]]
    lines += [f"output       {e['name']}: {shape(e)}" for e in spec["outputs"]]
    lines += [f"custom op    {e['name']}  <- {e['library']}" for e in spec["custom_ops"]]
    lines += [f"custom class {e['name']} ({', '.join(e['methods'])})  <- {e['library']}" for e in spec["custom_classes"]]
    for v in spec["variants"]:
        lines.append(f"variant      {v['isa']:<8} {v['arch']} model {v['model']}  {v['record']}  sha256 {v['sha256']}")
        lines.append(f"  features   {' '.join(v['cpu_features']) or '(baseline ' + v['arch'] + ')'}")
        if v.get("packed_for"):
            lines.append(f"  packed     weights laid out for oneDNN's {v['packed_for']} code")
    g = spec.get("golden") or {}
    tol = ", ".join(f"{k} rtol={v['rtol']:g} atol={v['atol']:g}" + (f" atol_rel={v['atol_rel']:g}" if "atol_rel" in v else "")
                    for k, v in g.get("tolerances", {}).items())
    lines.append(f"golden       {g.get('count')} cases in {g.get('record')}  ({tol})")
    if g.get("left_out"):
        lines.append(f"  left out   {', '.join(g['left_out'])} (over the size cap)")
    if g.get("degenerate_outputs"):
        lines.append(f"  degenerate outputs {', '.join(map(str, g['degenerate_outputs']))} (exported anyway)")
    for k, v in spec.get("metadata", {}).items():
        lines.append(f"metadata     {k} = {v}")
    return "\n".join(lines)


def _cmd_inspect(args) -> int:
    from .package import package_sizes, read_spec
    spec = read_spec(args.package)
    if args.json:
        print(json.dumps(spec, indent=2))
        return EXIT_OK
    print(_format_spec(spec))
    sizes = package_sizes(args.package)
    total = sizes.pop("total (file)")
    print(f"size         {total / (1 << 20):.2f} MiB")
    for what, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"  {n / (1 << 20):8.2f} MiB  {100 * n / max(total, 1):5.1f} %  {what}")
    return EXIT_OK


def _cmd_verify(args) -> int:
    from .cpu import host_arch
    from .package import read_spec, verify_package
    _load_ops_libraries(args)
    report = verify_package(args.package)
    for v in read_spec(args.package)["variants"]:
        if v["arch"] != host_arch():
            print(f"{v['isa']} ({v['arch']}): not run on this {host_arch()} machine; run pt2run verify on an "
                  f"{v['arch']} host", file=sys.stderr)
    if not report:
        print(f"{args.package}: none of its CPU variants runs on this machine; nothing was verified", file=sys.stderr)
        return EXIT_MISMATCH
    for r in report:
        status = "ok  " if r["passed"] else "FAIL"
        print(f"{status} {r['variant']:<8} {r['name']:<24} max abs {r['max_abs_error']:.3g}  "
              f"max err/scale {r['max_scaled_error']:.3g}"
              + (f"  {r['reason']}" if r["reason"] else ""))
    return EXIT_OK if all(r["passed"] for r in report) else EXIT_MISMATCH


def _case_inputs(path: Path) -> tuple:
    import torch
    try:
        value = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise UsageError(f"--input {path}: no such file") from None
    except Exception as e:
        raise UsageError(f"--input {path}: not a file torch.load reads ({type(e).__name__})") from None
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (list, tuple)) and value and all(isinstance(t, torch.Tensor) for t in value):
        return tuple(value)
    raise UsageError(f"--input {path}: expected torch.save of a tensor or of a list of tensors (one case's inputs), "
                     f"got {type(value).__name__}")


def _cmd_compare(args) -> int:
    from .package import compare_package
    _load_ops_libraries(args)
    model, example = _load_factory(args.model)
    cases = [_case_inputs(p) for p in args.input] if args.input else [example]
    report = compare_package(args.package, model, cases)
    if not report:
        print(f"{args.package}: none of its CPU variants runs on this machine; nothing was compared", file=sys.stderr)
        return EXIT_MISMATCH
    for r in report:
        status = "ok  " if r["passed"] else "FAIL"
        shape = "x".join(map(str, r["shape"])) or "scalar"
        print(f"{status} {r['variant']:<8} case {r['case']}  output {r['output']}  {r['dtype']:<8} {shape:<16} "
              f"max abs {r['max_abs_error']:.3g}  max err/scale {r['max_scaled_error']:.3g}"
              + (f"  {r['reason']}" if r["reason"] else ""))
    return EXIT_OK if all(r["passed"] for r in report) else EXIT_MISMATCH


def _cmd_new_op(args) -> int:
    from .errors import ScaffoldError
    from .scaffold import write_project
    try:
        files = write_project(args.name, args.out)
    except ScaffoldError as e:
        raise UsageError(str(e)) from None
    for f in files:
        print(f)
    return EXIT_OK


def _cmd_fetch_target(args) -> int:
    from .errors import CpuVariantError, TargetTorchError
    from .targets import fetch_target
    try:
        print(fetch_target(args.target, args.wheel))
    except (CpuVariantError, TargetTorchError) as e:
        raise UsageError(str(e)) from None
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="export-tools", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-q", "--quiet", action="store_true", help="print only results and errors")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, and tracebacks on errors")
    # the same flags after the subcommand too (`export ... -q`); SUPPRESS keeps an earlier one when absent
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="print only results and errors")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging, and tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("export", parents=[common], help="export a model to a .pt2 package",
                       description="Export MODULE:FACTORY (FACTORY() returns (model, example_inputs)) to a .pt2 "
                                   "package with a spec and golden cases inside; verified before it is written.")
    p.add_argument("--model", required=True, metavar="MODULE:FACTORY")
    p.add_argument("--out", required=True, type=Path, metavar="PATH", help="the package to write (.pt2)")
    p.add_argument("--dynamic-batch", type=_dynamic_batch, metavar="MIN:MAX", help="dim 0 of every input is dynamic")
    p.add_argument("--dynamic", action="append", metavar="INPUT.DIM=[K*]NAME:MIN:MAX",
                   help="one dynamic dim (repeatable; INPUT: a forward parameter name or an index; equal NAMEs are "
                        "one size; K*NAME: a multiple of K), e.g. --dynamic x.0=batch:1:32 --dynamic x.2=8*h:32:512")
    p.add_argument("--golden", type=int, default=4, metavar="N",
                   help="golden cases to store (default 4; with dynamic dims at least the corners of every range)")
    p.add_argument("--cpu-isa", type=_cpu_isa, default=None, metavar="ISA[,ISA...]",
                   help="CPU code variants, one compile each, in one package: native (this machine's best, "
                        "-march=native; the default), avx512, avx2, default (portable x86-64 levels); e.g. "
                        "avx2,avx512 runs on any AVX2 host and at full speed on AVX-512 ones; neon: aarch64")
    p.add_argument("--target", type=_targets, default=None, metavar="TARGET[,TARGET...]",
                   help="where the package runs: host (the default), linux-x86_64, linux-aarch64, or several in one "
                        "package (e.g. linux-x86_64,linux-aarch64); other arches are cross-compiled (their libtorch: "
                        "fetch-target, see docs/edge.md) and verified on the target with pt2run verify")
    p.add_argument("--golden-max-mb", type=float, default=16, metavar="MIB",
                   help="keep the golden cases' tensors within MIB (default 16; cases past it are left out, the "
                        "example is always kept)")
    p.add_argument("--golden-inputs", type=Path, metavar="FILE.pt",
                   help="golden cases of your own: torch.save of a list of input tuples (recorded after the example, "
                        "before the generated ones)")
    p.add_argument("--allow-degenerate-golden", action="store_true",
                   help="export even if an output is all zeros or constant in every golden case (warns instead)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--optimize", choices=["fold", "none"], default="fold",
                   help="CPU packages: fold (default) compiles the weights in as constants, batch norms folded into "
                        "their convolutions; none keeps them as parameters")
    p.add_argument("--lite", action="store_true",
                   help="add variants that run without libtorch, in pt2rt-lite (docs/lite.md); what lite cannot run "
                        "is refused by name")
    p.add_argument("--metadata", action="append", metavar="KEY=VALUE", help="extra metadata for the spec (repeatable)")
    p.add_argument("--ops-library", action="append", metavar="PATH",
                   help="an ops library to load first (repeatable); libraries the model's own imports load are "
                        "found without it")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("graph", parents=[common], help="print the exported graph of a model",
                       description="Export MODULE:FACTORY with torch.export and print its graph.")
    p.add_argument("--model", required=True, metavar="MODULE:FACTORY")
    p.add_argument("--dynamic-batch", type=_dynamic_batch, metavar="MIN:MAX")
    p.add_argument("--dynamic", action="append", metavar="INPUT.DIM=[K*]NAME:MIN:MAX")
    p.add_argument("--readable", action="store_true", help="Python code instead of the FX graph")
    p.add_argument("--ops-library", action="append", metavar="PATH",
                   help="an ops library to load first (repeatable); libraries the model's own imports load are "
                        "found without it")
    p.set_defaults(func=_cmd_graph)

    p = sub.add_parser("inspect", parents=[common], help="print the spec of a package", description="Print the spec of a .pt2 package.")
    p.add_argument("package", type=Path)
    p.add_argument("--json", action="store_true", help="the spec as JSON")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("verify", parents=[common], help="run a package's golden cases in Python",
                       description="Load each CPU variant of a package that this machine runs (in Python) and check its "
                                   "golden cases. Exit 1 when a case does not match or no variant runs here.")
    p.add_argument("package", type=Path)
    p.add_argument("--ops-library", action="append", metavar="PATH",
                   help="an ops library to load first (repeatable); libraries the model's own imports load are "
                        "found without it")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("compare", parents=[common], help="compare a package with the eager model on the same inputs",
                       description="Run the package (each CPU variant this machine runs) and the eager model "
                                   "MODULE:FACTORY on the same inputs and print, per output, the max abs error and the "
                                   "max error relative to the output's magnitude. Exit 1 when one is outside the "
                                   "package's golden tolerances.")
    p.add_argument("package", type=Path)
    p.add_argument("--model", required=True, metavar="MODULE:FACTORY")
    p.add_argument("--input", action="append", type=Path, metavar="FILE.pt",
                   help="one case's inputs: torch.save of a tensor, or of a list of tensors (repeatable; default: the "
                        "factory's example inputs)")
    p.add_argument("--ops-library", action="append", metavar="PATH",
                   help="an ops library to load first (repeatable); libraries the model's own imports load are "
                        "found without it")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("new-op", parents=[common], help="write a buildable ops project for your own operator",
                       description="Write DIR with a CMake project (pt2rt_add_ops_library), NAMESPACE::OP's schema and "
                                   "CPU/CUDA kernels to edit, a Python package <namespace>_ops that loads the library "
                                   "and registers the fake, and tests. DIR/README.md says how to build and use it.")
    p.add_argument("name", metavar="NAMESPACE::OP")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="a new (or empty) directory")
    p.set_defaults(func=_cmd_new_op)

    p = sub.add_parser("fetch-target", parents=[common], help="get another architecture's libtorch for --target",
                       description="Unpack TARGET's libtorch of this torch's version (headers and CPU libraries of its "
                                   "torch wheel, ~300 MB) into the per-machine folder export --target TARGET looks in "
                                   "(PT2RT_TARGETS_DIR, default ~/.cache/pt2rt/targets); prints that folder. Once per "
                                   "machine and torch version.")
    p.add_argument("target", choices=["linux-aarch64"])
    p.add_argument("--wheel", type=Path, metavar="FILE",
                   help="the target's torch wheel, already downloaded (default: pip download from the package index)")
    p.set_defaults(func=_cmd_fetch_target)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO,
                        format="export-tools: %(message)s", stream=sys.stderr, force=True)
    if not args.verbose:
        for noisy in ("torch", "torch._inductor", "torch._dynamo", "torch.export"):
            logging.getLogger(noisy).setLevel(logging.ERROR)
        import warnings
        warnings.filterwarnings("ignore")
    from .export import ExportError
    from .libraries import OpsLibraryError
    try:
        return args.func(args)
    except (ExportError, UsageError, OpsLibraryError) as e:
        return _fail(args, e)


def _fail(args, err: BaseException) -> int:
    if args.verbose:
        traceback.print_exception(err)
    print(f"export-tools: error: {str(err).splitlines()[0]}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
