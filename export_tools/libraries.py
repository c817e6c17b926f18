"""Which loaded ops library provides each custom op and class a graph uses, and the schemas it registered.

export_tools knows no ops library by name. A library is known to it when it was loaded
- through `load_ops_library(path)` (or `export_package(..., ops_libraries=[path])`): what the load registered is
  noted, or
- by anyone else with `torch.ops.load_library` (an ops package's `import`): the library whose file holds the source
  path its namespace was defined at (`TORCH_LIBRARY` records `__FILE__`, which the compiler puts in the library).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

from .errors import OpsLibraryError, first_line


_REPO_ROOT = Path(__file__).resolve().parents[1]


def built_candidates(file_name: str) -> list[Path]:
    """Where a library this project builds (runtime/) is looked for after its environment variable, in order: this
    checkout's build tree (release, then debug), then <sys.prefix>/lib."""
    import sys

    flavour = "cuda" if torch.version.cuda else "cpu"
    build = _REPO_ROOT / "build"
    return [build / f"{flavour}-release" / "lib" / file_name, build / f"{flavour}-debug" / "lib" / file_name,
            Path(sys.prefix) / "lib" / file_name]


def find_built(file_name: str, env_var: str) -> Path | None:
    """$env_var (which must name a file), else the first of built_candidates() that exists, else None."""
    env = os.environ.get(env_var)
    if env:
        if not Path(env).is_file():
            raise OpsLibraryError(f"{env_var}={env} does not name a file; expected the path of {file_name}")
        return Path(env)
    return next((p for p in built_candidates(file_name) if p.is_file()), None)


_lock = threading.Lock()
_providers: dict[str, Path] = {}  # namespace -> library, noted at load_ops_library


def _namespaces() -> set[str]:
    ops = {name.split("::", 1)[0] for name in torch._C._dispatch_get_all_op_names()}
    classes = {_class_namespace(s) for s in torch._C._jit_get_custom_class_schemas()}
    return ops | {c for c in classes if c}


def _class_namespace(schema) -> str | None:
    # a method's first argument is the class: "__torch__.torch.classes.<ns>.<Class>"
    args = schema.arguments
    parts = str(args[0].type).split(".") if args else []
    return parts[-2] if len(parts) >= 5 and parts[:3] == ["__torch__", "torch", "classes"] else None


def load_ops_library(path: str | os.PathLike) -> Path:
    """Load an ops library (once) and note the namespaces it registered."""
    path = Path(path).resolve()
    with _lock:
        if str(path) in torch.ops.loaded_libraries:
            return path
        if not path.is_file():
            raise OpsLibraryError(f"ops library {path} does not exist")
        before = _namespaces()
        try:
            torch.ops.load_library(str(path))
        except OSError as e:
            raise OpsLibraryError(f"could not load ops library {path}: {first_line(e)} "
                                  f"(it must be built against this torch, {torch.__version__})") from None
        for ns in _namespaces() - before:
            _providers[ns] = path
        return path


def _defined_at(namespace: str) -> str | None:
    """The source file of the namespace's TORCH_LIBRARY block, from the dispatcher's registration record."""
    for name in torch._C._dispatch_get_all_op_names():
        if name.split("::", 1)[0] != namespace:
            continue
        for line in torch._C._dispatch_dump(name).splitlines():
            if line.startswith("debug: registered at "):
                return line[len("debug: registered at "):].rsplit(":", 1)[0]
    return None


def provider_of(namespace: str) -> Path:
    """The loaded library that registered `namespace`."""
    with _lock:
        if namespace in _providers:
            return _providers[namespace]
        source = _defined_at(namespace)
        found = []
        if source:
            needle = source.encode()
            for lib in sorted(torch.ops.loaded_libraries):
                try:
                    if needle in Path(lib).read_bytes():
                        found.append(Path(lib).resolve())
                except OSError:
                    continue
        if len(found) == 1:
            _providers[namespace] = found[0]
            return found[0]
    why = (f"several loaded libraries name its source {source}: {', '.join(map(str, found))}" if found else
           "no library loaded with torch.ops.load_library registered it" if not source else
           f"no loaded library names its source {source}")
    raise OpsLibraryError(f"the graph uses custom namespace {namespace!r}, but which ops library provides it is not "
                          f"known ({why}); load it with export_tools.load_ops_library(path) or pass "
                          f"ops_libraries=[path]")


def op_schema(op: torch._ops.OpOverload) -> str:
    return str(op._schema)


def class_method_schemas(qualified: str, methods: list[str]) -> dict[str, str]:
    """Schemas of the class's `methods` and of its pickling methods (the runtime restores the object with them),
    keyed by method name. `qualified`: "ns::Class"."""
    wanted = set(methods) | {"__getstate__", "__setstate__"}
    return {k: v for k, v in sorted(registered_class_schemas(qualified).items()) if k in wanted}


def registered_class_schemas(qualified: str) -> dict[str, str]:
    """Every method schema of a registered class ("ns::Class"), keyed by method name; empty when not registered."""
    ns, cls = qualified.split("::", 1)
    type_name = f"__torch__.torch.classes.{ns}.{cls}"
    return {s.name: str(s) for s in torch._C._jit_get_custom_class_schemas()
            if s.arguments and str(s.arguments[0].type) == type_name}


def check_registered(spec: dict) -> None:
    """Every op and class the package calls is registered, with the schema it was exported against (a stale or
    other build of a library registers other ones); an OpsLibraryError naming each difference otherwise."""
    problems = []
    for op in spec["custom_ops"]:
        try:
            have = str(torch._C._get_schema(op["name"], op.get("overload", "")))
        except RuntimeError:
            problems.append(f"op {op['name']} (from {op['library']}) is not registered")
            continue
        if op.get("schema") and have != op["schema"]:
            problems.append(f"op {op['name']}: the package was exported against '{op['schema']}', the loaded "
                            f"library registers '{have}'")
    for cls in spec["custom_classes"]:
        have = registered_class_schemas(cls["name"])
        if not have:
            problems.append(f"class {cls['name']} (from {cls['library']}) is not registered")
            continue
        for method, schema in cls.get("method_schemas", {}).items():
            if have.get(method) != schema:
                problems.append(f"class {cls['name']}: the package was exported against '{schema}', the loaded "
                                f"library registers '{have.get(method, 'no method ' + method)}'")
    if problems:
        raise OpsLibraryError(f"the package's ops libraries do not match: {'; '.join(problems)} (load the libraries "
                              f"it was exported with: --ops-library / export_tools.load_ops_library)")
