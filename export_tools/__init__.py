"""Build-time tools: export models that use custom ops (from any loaded ops library) into self-describing,
self-verifying AOTInductor packages (model.pt2). Loads no ops library by itself: see export_tools.libraries."""

from . import _version
from .export import ExportError, export_package, load_package, read_golden, read_spec, verify_package
from .libraries import OpsLibraryError, load_ops_library

__version__ = _version.read()

__all__ = ["ExportError", "OpsLibraryError", "export_package", "load_ops_library", "load_package", "read_golden",
           "read_spec", "verify_package"]
