"""my_ops: the example ops library's Python side. `import my_ops` finds and loads libidentity_conv_ops.so once and
registers the fakes that tracing, torch.compile and torch.export need.

    torch.ops.my_ops.identity_conv_op(x)            torch.classes.my_ops.IdentityConvClass(channels, k)

Search order for the library: the environment variable IDENTITY_CONV_OPS_LIBRARY, then this checkout's build tree
(build/<flavour>-release/lib and -debug, the flavour that matches the running torch), then installed locations
(<sys.prefix>/lib, this package's folder).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import torch

LIBRARY_NAME = "libidentity_conv_ops.so"
ENV_VAR = "IDENTITY_CONV_OPS_LIBRARY"
NAMESPACE = "my_ops"

_lock = threading.Lock()
_loaded: Path | None = None
_REPO_ROOT = Path(__file__).resolve().parents[3]  # ops/python/my_ops/__init__.py


class OpsLibraryError(RuntimeError):
    """The ops library could not be found or loaded."""


def flavour() -> str:
    """The build flavour that matches the running torch: 'cuda' for a CUDA build, else 'cpu'."""
    return "cuda" if torch.version.cuda else "cpu"


def candidates() -> list[Path]:
    """Where the library is looked for, in order (the environment variable is not among them)."""
    build = _REPO_ROOT / "build"
    return [
        build / f"{flavour()}-release" / "lib" / LIBRARY_NAME,
        build / f"{flavour()}-debug" / "lib" / LIBRARY_NAME,
        Path(sys.prefix) / "lib" / LIBRARY_NAME,
        Path(__file__).resolve().parent / "lib" / LIBRARY_NAME,
    ]


def find_library() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
        if not path.is_file():
            raise OpsLibraryError(f"{ENV_VAR}={env} does not name a file; expected the path of {LIBRARY_NAME}")
        return path.resolve()
    for path in candidates():
        if path.is_file():
            return path.resolve()
    tried = "\n  ".join(str(p) for p in candidates())
    raise OpsLibraryError(
        f"{LIBRARY_NAME} not found. Build it (`make build`, FLAVOUR={flavour()}) or set {ENV_VAR} to its path. "
        f"Looked in:\n  {tried}")


def load_library() -> Path:
    """Load the library once (later calls return the same path) and register the fakes."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        path = find_library()
        try:
            torch.ops.load_library(str(path))
        except OSError as e:
            raise OpsLibraryError(
                f"could not load {path}: {e}. It must be built against this torch ({torch.__version__}).") from e
        from . import fakes
        fakes.register()
        _loaded = path
        return path


def library_path() -> Path:
    """The path of the loaded library (loading it if needed)."""
    return load_library()


load_library()
