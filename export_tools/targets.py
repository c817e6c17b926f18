"""The libtorch of another architecture that cross-compiled packages link against (export --target linux-aarch64).

Found, in order: PT2RT_TORCH_<TARGET> (a libtorch folder: include/ and lib/libtorch_cpu.so), then what
`python -m export_tools fetch-target <TARGET>` unpacked into the per-machine folder (PT2RT_TARGETS_DIR, default
~/.cache/pt2rt/targets/<TARGET>/torch-<version>/torch). fetch-target takes the headers and the CPU libraries out of
that target's torch wheel of this torch's version (PyPI's aarch64 wheel; `--wheel FILE` uses one already on disk),
and writes a CPU-only TorchConfig.cmake beside them, so `find_package(Torch)` of a cross build (an ops library of
your own, docs/ops.md) finds it there.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .errors import CpuVariantError, TargetTorchError

log = logging.getLogger("export_tools")

# target -> (pip's --platform values, the arch in the wheel's name, the ELF e_machine of its libraries)
_TARGETS = {
    "linux-aarch64": (("manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"), "aarch64", 183),
}
# Imported targets of the fetched libtorch for CMake (the wheel's own TorchConfig.cmake insists on CUDA): the
# templates the libtorch recipe (recipes/libtorch) writes from too, @VERSION@ replaced.
CMAKE_TEMPLATES = Path(__file__).parent / "cmake"
# Libraries of the wheel that the target's model libraries never link: CUDA, Python, torch's tests.
_SKIPPED_LIBS = ("cuda", "nvrtc", "nvshmem", "python", "libshm", "global_deps", "libtorch.so")


def _key(target: str) -> str:
    return target.upper().replace("-", "_")


def _torch_version() -> str:
    from . import compat
    return compat.release()


def targets_dir() -> Path:
    value = os.environ.get("PT2RT_TARGETS_DIR")
    if value:
        return Path(value)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pt2rt" / "targets"


def fetched_dir(target: str) -> Path:
    return targets_dir() / target / f"torch-{_torch_version()}" / "torch"


def _check_target(target: str) -> None:
    if target not in _TARGETS:
        raise CpuVariantError(f"no cross target {target} (expected one of {', '.join(_TARGETS)})")


def is_libtorch(folder: Path) -> bool:
    return (folder / "include" / "torch").is_dir() and (folder / "lib" / "libtorch_cpu.so").is_file()


def target_torch(target: str) -> Path:
    """The target's libtorch folder; a TargetTorchError says how to provide one."""
    _check_target(target)
    key = _key(target)
    named = os.environ.get(f"PT2RT_TORCH_{key}")
    if named:
        if not is_libtorch(Path(named)):
            raise TargetTorchError(f"PT2RT_TORCH_{key}={named} is not a libtorch folder (expected include/torch and "
                                   f"lib/libtorch_cpu.so)")
        return Path(named)
    fetched = fetched_dir(target)
    if is_libtorch(fetched):
        return fetched
    raise TargetTorchError(f"target {target} needs that target's libtorch {_torch_version()}: run `python -m "
                           f"export_tools fetch-target {target}` (its torch wheel from the package index, once per "
                           f"machine, into {fetched.parent}), or set PT2RT_TORCH_{key} to a libtorch folder")


def _download(target: str, version: str, into: Path) -> Path:
    platforms = _TARGETS[target][0]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
           *[a for p in platforms for a in ("--platform", p)], "-d", str(into), f"torch=={version}"]
    log.info("downloading torch %s for %s (pip download)", version, target)
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(into.glob("torch-*.whl"))
    if result.returncode != 0 or not wheels:
        lines = result.stderr.strip().splitlines()
        errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR: ")]
        why = errors[0] if errors else (lines or ["no wheel written"])[-1]  # pip's first error says what it missed
        raise TargetTorchError(f"cannot download torch {version} for {target}: {why} (with no package index, give "
                               f"the wheel with --wheel FILE)")
    return wheels[0]


def _elf_machine(data: bytes) -> int:
    return int.from_bytes(data[18:20], "little") if data[:4] == b"\x7fELF" else -1


def _unpack(wheel: Path, target: str, version: str, dest: Path) -> None:
    _, arch, machine = _TARGETS[target]
    name = wheel.name
    if not (name.startswith(f"torch-{version}-") or name.startswith(f"torch-{version}+")):
        raise TargetTorchError(f"{wheel} is not a torch {version} wheel (this Python's torch is {version}; the "
                               f"target's libtorch must be the same version)")
    if not name.endswith(f"_{arch}.whl"):
        raise TargetTorchError(f"{wheel} is not a wheel for {target}")
    staging = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest.parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.startswith("torch/include/") or
                       (m.startswith("torch/lib/") and ".so" in m and not any(s in m for s in _SKIPPED_LIBS))]
            for m in members:
                zf.extract(m, staging)
        torch_dir = staging / "torch"
        if not is_libtorch(torch_dir):
            raise TargetTorchError(f"{wheel} holds no libtorch (include/torch, lib/libtorch_cpu.so)")
        with open(torch_dir / "lib" / "libtorch_cpu.so", "rb") as f:
            if _elf_machine(f.read(20)) != machine:
                raise TargetTorchError(f"{wheel}'s libtorch_cpu.so is not built for {target}")
        _write_cmake_config(torch_dir, version)
        try:
            os.rename(torch_dir, dest)
        except OSError:
            if not is_libtorch(dest):  # not another fetch that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_cmake_config(torch_dir: Path, version: str) -> None:
    cmake_dir = torch_dir / "share" / "cmake" / "Torch"
    cmake_dir.mkdir(parents=True, exist_ok=True)
    for name in ("TorchConfig.cmake", "TorchConfigVersion.cmake"):
        tmp = cmake_dir / f".{name}.{os.getpid()}"
        tmp.write_text((CMAKE_TEMPLATES / f"{name}.in").read_text().replace("@VERSION@", version))
        os.replace(tmp, cmake_dir / name)


def fetch_target(target: str, wheel: Path | None = None) -> Path:
    """Unpacks the target's libtorch (of this torch's version) into the per-machine folder, once; returns it."""
    _check_target(target)
    dest = fetched_dir(target)
    if is_libtorch(dest):
        if not (dest / "share" / "cmake" / "Torch" / "TorchConfig.cmake").is_file():  # fetched by an older version
            _write_cmake_config(dest, _torch_version())
        return dest
    version = _torch_version()
    dest.parent.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        if not wheel.is_file():
            raise TargetTorchError(f"--wheel {wheel} does not exist")
        _unpack(wheel, target, version, dest)
    else:
        with tempfile.TemporaryDirectory(prefix="pt2rt-wheel-") as tmp:
            _unpack(_download(target, version, Path(tmp)), target, version, dest)
    log.info("%s libtorch %s in %s", target, version, dest)
    return dest
