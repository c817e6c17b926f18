"""Find and load libidentity_conv_ops.so once, and register the fake op and class for tracing.

Search order: the environment variable IDENTITY_CONV_OPS_LIBRARY, then this checkout's build tree
(build/<flavour>-release/lib, the flavour that matches the running torch), then installed locations
(<sys.prefix>/lib, the package folder).
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
OP_NAME = "identity_conv_op"
CLASS_NAME = "IdentityConvClass"

_lock = threading.Lock()
_loaded: Path | None = None

_REPO_ROOT = Path(__file__).resolve().parent.parent


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
        _register_fakes()
        _loaded = path
        return path


def library_path() -> Path:
    """The path of the loaded library (loading it if needed)."""
    return load_library()


def _check_input(x: torch.Tensor, what: str) -> None:
    # Same checks, same words as the C++ kernels, so tracing fails where running would.
    torch._check(x.dim() == 4, lambda: f"{what}: expected a 4-D NCHW tensor, got a {x.dim()}-D tensor of shape "
                                       f"{list(x.shape)}")
    torch._check(x.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16),
                 lambda: f"{what}: expected dtype float32, float64, float16 or bfloat16, got {x.dtype}")


def _register_fakes() -> None:
    @torch.library.register_fake(f"{NAMESPACE}::{OP_NAME}")
    def _identity_conv_fake(x):
        _check_input(x, OP_NAME)
        # empty_like keeps dense strides and makes others contiguous, as the kernels do.
        return torch.empty_like(x)

    @torch.library.register_fake(f"{NAMESPACE}::depthwise_conv2d")
    def _depthwise_fake(x, weight):
        _check_input(x, "depthwise_conv2d")
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    @torch._library.register_fake_class(f"{NAMESPACE}::{CLASS_NAME}")
    class FakeIdentityConvClass:
        def __init__(self, weight: torch.Tensor):
            self.weight = weight

        @classmethod
        def __obj_unflatten__(cls, flat_ctx):
            return cls(**dict(flat_ctx))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            _check_input(x, "IdentityConvClass.forward")
            torch._check(x.shape[1] == self.weight.shape[0],
                         lambda: f"IdentityConvClass.forward: expected an input with {self.weight.shape[0]} "
                                 f"channels (dim 1), got shape {list(x.shape)}")
            return torch.empty(x.shape, dtype=x.dtype, device=x.device)

        def get_weight(self) -> torch.Tensor:
            return self.weight.clone()

        def channels(self) -> int:
            return self.weight.shape[0]

        def kernel_size(self) -> int:
            return self.weight.shape[2]
