"""Build-time tools: load the custom ops library, export models that use it, compile them into model.pt2."""

import os
import sys

from .ops import OpsLibraryError, library_path, load_library

__version__ = "0.1.0"


def _started_as_cli() -> bool:
    # `python -m export_tools` (argv[0] is "-m" while the package is imported) or the console script:
    # the CLI reports a missing library in one line itself.
    return bool(sys.argv) and (sys.argv[0] == "-m" or os.path.basename(sys.argv[0]) == "export-tools")


try:
    load_library()
except OpsLibraryError:
    if not _started_as_cli():
        raise

from .export import ExportError, export_package, load_package, read_spec, verify_package  # noqa: E402

__all__ = ["ExportError", "OpsLibraryError", "export_package", "library_path", "load_library", "load_package",
           "read_spec", "verify_package"]
