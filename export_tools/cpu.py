"""CPU code variants of a package: which vector ISA and -march each compile uses, and the CPU features its code
needs, read from the compiler itself for the exact flags inductor passes.

A variant name is what `--cpu-isa` takes: "native" (inductor's choice for this machine, -march=native: fastest
here, runs only on CPUs with every feature of this one), or a portable x86-64 level - "avx512" (x86-64-v4),
"avx2" (x86-64-v3), "default" (x86-64, no vector ISA) - or "neon" (aarch64: armv8-a with inductor's NEON code, the
one aarch64 variant; cross-compiled, see export_tools.cross). Portable levels compile on any x86-64 host, also one
that lacks them; only the variants this host can execute are verified at export.

A target is where a package runs: "host" (this machine), "linux-x86_64" or "linux-aarch64". plan() gives each target
its variants: the cpu_isa names of its arch, else its default (native for this machine's arch, neon for aarch64).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from typing import Iterator

from torch._inductor import config as inductor_config
from torch._inductor import cpp_builder, cpu_vec_isa

from . import compat, cross
from .errors import CpuVariantError

NATIVE = "native"
# name -> (-march for every file of the compile, inductor vector ISA class or None for scalar code)
PORTABLE_X86 = {
    "avx512": ("x86-64-v4", "avx512"),
    "avx2": ("x86-64-v3", "avx2"),
    "default": ("x86-64", None),
}
NEON = "neon"
NAMES = (NATIVE, *PORTABLE_X86, NEON)
TARGETS = {"linux-x86_64": "x86_64", "linux-aarch64": "aarch64"}
HOST = "host"

# Compiler macros that name an ISA extension but not as __NAME__ -> NAME.
_MACRO_ALIASES = {"__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16": "cx16"}
_FEATURE_MACRO = re.compile(r"^__([A-Z0-9_]+)__$")


class _PortableAVX512(cpu_vec_isa.VecAVX512):
    """AVX-512 F/DQ/VL/BW + FMA and nothing the build host happens to have besides (no -mavx512bf16)."""

    def build_arch_flags(self) -> str:
        return self._arch_flags

    def __bool__(self) -> bool:  # compiled, not probed: the build host may lack AVX-512
        return True

    __hash__ = cpu_vec_isa.VecISA.__hash__


class _PortableAVX2(cpu_vec_isa.VecAVX2):
    def __bool__(self) -> bool:
        return True

    __hash__ = cpu_vec_isa.VecISA.__hash__


class _PortableNEON(cpu_vec_isa.VecNEON):
    """Inductor's NEON code (Vectorized<float> on 128-bit registers) for any armv8-a CPU, compiled on any host."""

    def __bool__(self) -> bool:
        return True

    __hash__ = cpu_vec_isa.VecISA.__hash__


_PORTABLE_ISA = {"avx512": _PortableAVX512, "avx2": _PortableAVX2}


@dataclass(frozen=True)
class Variant:
    name: str                 # "native", "avx512", "avx2", "default"
    arch: str                 # "x86_64", "aarch64"
    vec_isa: str              # inductor's name for the vector code ("avx512", "avx512 avx512_vnni", "default")
    flags: tuple[str, ...]    # the ISA-related compiler flags the compile used
    cpu_features: tuple[str, ...]


def parse_names(value: str | tuple[str, ...] | list[str] | None) -> list[str]:
    """'avx2,avx512' / ("avx2", "avx512") / None -> a list of variant names, checked, without duplicates."""
    if value is None:
        return [NATIVE]
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(i).strip() for i in items]
    if not names or any(not n for n in names):
        raise CpuVariantError(f"expected one or more CPU ISA names, got {value!r}")
    for n in names:
        if n not in NAMES:
            raise CpuVariantError(f"unknown cpu_isa {n!r}: expected {', '.join(NAMES)} (or a comma-separated list)")
    if len(set(names)) != len(names):
        raise CpuVariantError(f"cpu_isa lists a variant twice: {', '.join(names)}")
    return names


def arch_of(name: str) -> str | None:
    """The arch a variant name compiles for (None: native, this machine's)."""
    return "aarch64" if name == NEON else None if name == NATIVE else "x86_64"


def parse_targets(value: str | tuple[str, ...] | list[str] | None) -> list[str]:
    """'linux-x86_64,linux-aarch64' / ("host",) / None -> target names ("host" resolved), checked, no duplicates."""
    if value is None:
        value = HOST
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(i).strip() for i in items]
    if not names or any(not n for n in names):
        raise CpuVariantError(f"expected one or more targets, got {value!r}")
    resolved = []
    for n in names:
        if n == HOST:
            n = host_target()
        elif n not in TARGETS:
            raise CpuVariantError(f"unknown target {n!r}: expected host, {', '.join(TARGETS)} (or a comma-separated list)")
        if n in resolved:
            raise CpuVariantError(f"target lists {n} twice (host is {host_target()})")
        resolved.append(n)
    return resolved


def host_target() -> str:
    return f"linux-{host_arch()}"


def plan(target, cpu_isa) -> list[str]:
    """The variant names to compile for `target` (see parse_targets) and `cpu_isa` (see parse_names), in order."""
    targets = parse_targets(target)
    names = parse_names(cpu_isa) if cpu_isa is not None else []
    arches = {TARGETS[t] for t in targets}
    here = host_arch()
    for n in names:
        arch = arch_of(n) or here
        if arch not in arches:
            raise CpuVariantError(f"cpu_isa {n} is for {arch}, which is not a target here "
                                  f"({', '.join(targets)}); add linux-{arch} to the targets or drop {n}")
    out = []
    for t in targets:
        arch = TARGETS[t]
        mine = [n for n in names if (arch_of(n) or here) == arch]
        if not mine:
            mine = [NATIVE] if arch == here else [NEON] if arch == "aarch64" else ["default"]
        if arch != here and NATIVE in mine:
            raise CpuVariantError(f"cpu_isa native means this machine ({here}); target {t} needs a portable level")
        if arch == "x86_64" and here != "x86_64":
            raise CpuVariantError(f"target {t}: x86-64 variants are compiled on an x86-64 machine (this is {here})")
        out.extend(mine)
    return out


def host_arch() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def isa_name(isa: cpu_vec_isa.VecISA) -> str:
    text = str(isa).lower()
    return "default" if not text or "invalid" in text else text


@contextlib.contextmanager
def compiling(name: str) -> Iterator[Variant]:
    """Inductor set up to compile variant `name` for the duration; yields what the compile will use."""
    arch = arch_of(name) or host_arch()
    if name not in (NATIVE, NEON) and host_arch() != "x86_64":
        raise CpuVariantError(f"cpu_isa {name} is an x86-64 level; this machine is {host_arch()} (use native)")
    compiler = None
    if name == NATIVE:
        march, isa_list = compat.march(), None
    elif name == NEON:
        # inductor still runs the build machine's compiler on parts of the code: no -march for it
        march, isa_list = "", [_PortableNEON()]
        compiler = cross.toolchain("linux-aarch64").cxx
    else:
        march, isa_class = PORTABLE_X86[name]
        isa_list = [_PORTABLE_ISA[isa_class]()] if isa_class else []
    saved_list = cpu_vec_isa.valid_vec_isa_list
    with compat.patch_march(march), inductor_config.patch({} if name == NATIVE else {"cpp.simdlen": None}):
        try:
            if isa_list is not None:
                # pick_vec_isa() reads this module global: every caller in inductor then sees the one ISA.
                cpu_vec_isa.valid_vec_isa_list = lambda: isa_list  # type: ignore[assignment]
            with _without_env("ATEN_CPU_CAPABILITY", unless=name == NATIVE):
                isa = cpu_vec_isa.pick_vec_isa()
                flags = ("-march=armv8-a",) if name == NEON else tuple(_isa_flags(isa))
                yield Variant(name=name, arch=arch, vec_isa=isa_name(isa), flags=flags,
                              cpu_features=features_for_flags(flags, compiler))
        finally:
            cpu_vec_isa.valid_vec_isa_list = saved_list


@contextlib.contextmanager
def _without_env(key: str, unless: bool) -> Iterator[None]:
    old = os.environ.get(key)
    if not unless:
        os.environ.pop(key, None)
    try:
        yield
    finally:
        if old is not None:
            os.environ[key] = old


def _isa_flags(isa: cpu_vec_isa.VecISA) -> list[str]:
    """The -march and ISA flags inductor gives the compiler for the current config (its own functions)."""
    flags = compat.arch_cflags(cpp_builder.get_cpp_compiler(), host_arch())
    _, isa_flags = cpp_builder._get_build_args_of_chosen_isa(isa)
    for f in isa_flags:
        flags.extend(f.split())
    return flags


@functools.lru_cache(maxsize=None)
def features_for_flags(flags: tuple[str, ...], compiler: str | None = None) -> tuple[str, ...]:
    """The CPU features code compiled with `flags` may use: the ISA macros the compiler defines for them that it
    does not define for the architecture's baseline. Names are the macros' (__AVX512BF16__ -> avx512bf16)."""
    native = compiler is None
    compiler = compiler or cpp_builder.get_cpp_compiler()
    baseline = ("-march=x86-64",) if native and host_arch() == "x86_64" else ()
    base = _feature_macros(compiler, baseline)
    return tuple(sorted(_feature_macros(compiler, flags) - base))


def _feature_macros(compiler: str, flags: tuple[str, ...]) -> set[str]:
    try:
        out = subprocess.run([compiler, *flags, "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        stderr = getattr(e, "stderr", "") or ""
        raise CpuVariantError(f"{compiler} rejects the flags {' '.join(flags)}: "
                              f"{stderr.strip().splitlines()[-1] if stderr.strip() else e}") from e
    found = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] != "#define":
            continue
        macro = parts[1]
        if macro in _MACRO_ALIASES:
            found.add(_MACRO_ALIASES[macro])
        elif (m := _FEATURE_MACRO.match(macro)) and (len(parts) < 3 or parts[2] == "1"):
            found.add(m.group(1).lower())
    return found


# -m flags that set an ABI or a target OS, not an ISA extension: their macros are no CPU features
_ABI_MACROS = {"android", "ilp32", "long_double_64", "long_double_80", "long_double_128"}


@functools.lru_cache(maxsize=None)
def compiler_features(compiler: str | None = None) -> frozenset[str]:
    """Every CPU feature name the compiler can give an x86-64 compile (-march=native included: it adds the -m flags
    of what cpuid reports): the features each of its -m ISA flags implies. Empty on another arch."""
    if host_arch() != "x86_64":
        return frozenset()
    compiler = compiler or cpp_builder.get_cpp_compiler()
    listing = subprocess.run([compiler, "-Q", "--help=target"], capture_output=True, text=True, check=True,
                             timeout=60).stdout
    base = _feature_macros(compiler, ("-march=x86-64",))
    out: set[str] = set()
    for line in listing.splitlines():
        parts = line.split()
        is_flag = len(parts) == 2 and parts[1] in ("[enabled]", "[disabled]")
        if not is_flag or not re.fullmatch(r"-m[a-z0-9_-]+", parts[0]):
            continue
        try:
            out |= _feature_macros(compiler, ("-march=x86-64", parts[0])) - base
        except CpuVariantError:
            continue  # a flag this mode refuses (-m16 with -march=x86-64 ...)
    return frozenset(out - _ABI_MACROS)


def every_torch_isa() -> list[cpu_vec_isa.VecISA]:
    """An instance of every vector ISA class torch's inductor defines (tests use it)."""
    out = []
    for cls in _subclasses(cpu_vec_isa.VecISA):
        if cls.__module__ != cpu_vec_isa.__name__:
            continue
        try:
            out.append(cls())
        except TypeError:  # a vector width to give (VecSVE of torch 2.12 and newer)
            out.append(cls(256))
    return out


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


@functools.lru_cache(maxsize=None)
def host_features() -> frozenset[str]:
    """This machine's CPU features in the same vocabulary (what the compiler's -march=native sees)."""
    native = ("-march=native",) if host_arch() == "x86_64" else ("-mcpu=native",)
    return frozenset(features_for_flags(native))


def runs_here(variant_arch: str, features) -> list[str]:
    """The features a variant needs that this machine lacks ([] when it runs here; its arch if that differs)."""
    if variant_arch != host_arch():
        return [f"arch {variant_arch}"]
    return sorted(set(features) - host_features())
