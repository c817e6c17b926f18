"""What differs between the torch versions export_tools supports, in one place (the runtime's twin is
runtime/src/compat.cpp; the two rules must agree).

Supported: torch 2.11 through 2.15 (`make test-torch TORCH=2.x` runs the core tests against one of them).
Which package runs under which torch - AOTInductor's promise, and what this project tests:
- the model library calls libtorch only through AOTInductor's C shim, whose functions are kept ("maintain the
  old and new versions of the APIs until all old model.so go out of use", torch/csrc/inductor/aoti_torch/c/
  shim.h), and newer ones are added under TORCH_FEATURE_VERSION: a package made by torch 2.X runs under
  libtorch 2.Y for Y >= X, not the other way round (a newer model library may call shim functions an older
  libtorch lacks, and newer loaders read a layout older ones do not);
- so a package is loaded when its torch's minor version is at most this torch's, within the supported range,
  and refused otherwise, naming both versions.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch._inductor import config as inductor_config

# The supported range, (major, minor) inclusive.
OLDEST = (2, 11)
NEWEST = (2, 15)


def parse(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a torch version string ("2.11.0+cu130" -> (2, 11, 0))."""
    base = version.split("+")[0]
    parts = base.split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
        patch = int("".join(c for c in parts[2] if c.isdigit()) or 0) if len(parts) > 2 else 0
    except (IndexError, ValueError):
        raise ValueError(f"not a torch version: {version!r} (expected MAJOR.MINOR[.PATCH][+LOCAL])") from None
    return major, minor, patch


TORCH = parse(torch.__version__)


def release(version: str | None = None) -> str:
    """MAJOR.MINOR.PATCH without the local part ("+cpu", "+cu130") - this torch's when no version is given."""
    major, minor, patch = parse(version or torch.__version__)
    return f"{major}.{minor}.{patch}"


def supported(version: str | None = None) -> bool:
    """Whether a torch version (this one by default) is in the supported range."""
    return OLDEST <= parse(version or torch.__version__)[:2] <= NEWEST


def why_not_loadable(package_torch: str, runtime_torch: str | None = None) -> str | None:
    """None when a package exported by `package_torch` loads under `runtime_torch` (this torch by default);
    otherwise why not, in one line naming both."""
    runtime_torch = runtime_torch or torch.__version__
    made, here = parse(package_torch)[:2], parse(runtime_torch)[:2]
    if made[0] != here[0] or made[1] > here[1]:
        return (f"the package was exported with torch {package_torch}, newer than this torch {runtime_torch}: "
                f"AOTInductor runs a package under the torch that made it or a newer one (export it with torch "
                f"{here[0]}.{here[1]} or older)")
    if made < OLDEST:
        return (f"the package was exported with torch {package_torch}, older than the oldest supported torch "
                f"{OLDEST[0]}.{OLDEST[1]} (export it again; this torch is {runtime_torch})")
    return None


# inductor's cpp.march (the -march of a compile, None: native) appeared in 2.12; 2.11 writes -march=native into
# its optimisation flags itself, which patch_march rewrites there.
_HAS_CPP_MARCH = hasattr(inductor_config.cpp, "march")
_march_211: list[str | None] = [None]


def march() -> str | None:
    """The -march inductor compiles with now: None for the machine's own (native), "" for none."""
    return inductor_config.cpp.march if _HAS_CPP_MARCH else _march_211[0]


@contextlib.contextmanager
def patch_march(value: str | None) -> Iterator[None]:
    """Inductor compiles with -march=`value` for the duration (None: native; "": no -march)."""
    if _HAS_CPP_MARCH:
        with inductor_config.patch({"cpp.march": value}):
            yield
        return
    from torch._inductor import cpp_builder

    original = cpp_builder._get_optimization_cflags

    def rewritten(*args, **kwargs):
        cflags, ldflags = original(*args, **kwargs)
        if _march_211[0] is not None:
            cflags = [f for f in cflags if f != "march=native"] + ([f"march={_march_211[0]}"] if _march_211[0] else [])
        return cflags, ldflags

    saved = _march_211[0]
    _march_211[0] = value
    cpp_builder._get_optimization_cflags = rewritten
    try:
        yield
    finally:
        cpp_builder._get_optimization_cflags = original
        _march_211[0] = saved


def arch_cflags(compiler: str, machine: str) -> list[str]:
    """The -march (or -mcpu) flags inductor gives `compiler` now, as flags ("-march=x86-64-v3")."""
    if _HAS_CPP_MARCH:
        from torch._inductor import cpp_builder

        return ["-" + f for f in cpp_builder._get_cpu_arch_cflags(compiler)]
    value = _march_211[0]
    if value is None:
        return ["-march=native"] if machine == "x86_64" else ["-mcpu=native"]
    return [f"-march={value}"] if value else []


def loader_records(library_record: str) -> dict[str, bytes]:
    """Records a model folder carries besides its library so that every supported torch's loader reads it: torch
    2.11's finds the model's metadata by the name of its generated source (<stem>.cpp -> <stem>_metadata.json),
    which packages do not carry (loading needs the library alone), so an empty file of that name stands in for
    it. Newer loaders look for *_metadata.json themselves and ignore the source when the library is there."""
    assert library_record.endswith(".so"), library_record
    return {library_record[:-len(".so")] + ".cpp": b""}
