"""Build-time tools: export models that use custom ops (from any loaded ops library) into self-describing,
self-verifying AOTInductor packages (model.pt2). Loads no ops library by itself: see export_tools.libraries.

The names below are imported on first use, so that `python -m export_tools --help` and the other light commands do
not pay for importing torch and inductor (~4 s)."""

import importlib

from . import _version

__version__ = _version.read()

_LAZY = {
    "export_package": ".export", "export_program": ".export", "compare_package": ".package", "load_package": ".package", "read_golden": ".package",
    "read_spec": ".package", "verify_package": ".package", "load_ops_library": ".libraries",
    "ExportError": ".errors", "CpuVariantError": ".errors", "DynamicShapesError": ".errors", "OpsLibraryError": ".errors",
    "ScaffoldError": ".errors", "TargetTorchError": ".errors",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
