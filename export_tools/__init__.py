"""Build-time tools: load the custom ops library, export models that use it, compile them into model.pt2."""

from .ops import OpsLibraryError, library_path, load_library

__all__ = ["OpsLibraryError", "library_path", "load_library"]
__version__ = "0.1.0"

load_library()
