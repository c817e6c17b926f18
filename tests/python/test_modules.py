"""export_tools as a set of modules: one error family, and no module that needs, even lazily, one that needs it."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import export_tools
from export_tools import ExportError
from export_tools.errors import first_line

PACKAGE = Path(export_tools.__file__).parent


def _imports(module: str) -> set[str]:
    """The export_tools modules `module` imports anywhere in its code (in a function too)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("export_tools."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module == "export_tools":  # from export_tools import x
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):  # import export_tools.x
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("export_tools."))
    return out - {module}


def test_no_import_cycles():
    modules = sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)]))
    graph = {m: _imports(m) & set(modules) for m in modules}
    state: dict[str, str] = {}

    def visit(m, path):
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", f"import cycle: {' -> '.join(path + [m])}"
        state[m] = "open"
        for n in sorted(graph[m]):
            visit(n, path + [m])
        state[m] = "done"

    for m in modules:
        if m != "__main__":  # the CLI imports everything and nothing imports it
            visit(m, [])
    assert graph["cross"] >= {"layout"} and "package" not in graph["cross"]  # the layout stands alone


def test_every_error_is_an_export_error():
    found = []
    for info in pkgutil.iter_modules([str(PACKAGE)]):
        if info.name == "__main__":
            continue
        module = importlib.import_module(f"export_tools.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Exception) and cls.__module__.startswith("export_tools."):
                found.append(cls)
                assert issubclass(cls, ExportError), f"{cls.__module__}.{cls.__name__} is outside the ExportError family"
    names = {c.__name__ for c in found}
    assert {"CpuVariantError", "TargetTorchError", "DynamicShapesError", "OpsLibraryError", "ScaffoldError",
            "LiteError"} <= names, names


def test_first_line():
    assert first_line(ValueError("one\ntwo")) == "one"
    assert first_line(ValueError("  \n")) == "ValueError"
    assert first_line(KeyError()) == "KeyError"
