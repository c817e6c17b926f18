"""Model libraries for another architecture: inductor writes the model's C++ (aot_inductor.package_cpp_only), a cross
compiler builds it against that target's libtorch, and the result is laid out as a native compile's package is.

AOTInductor compiles natively only. Its C++ output is portable apart from two things handled here: the weights come
as an object file of the build machine (their bytes are re-assembled for the target), and the generated build files
carry the build machine's paths (they are not used; the flags are).

Where the tools are (linux-aarch64):
  PT2RT_CXX_LINUX_AARCH64    the C++ cross compiler (default: aarch64-linux-gnu-g++ on PATH)
  the target's libtorch      as export_tools.targets finds it: PT2RT_TORCH_LINUX_AARCH64, else what
                             `python -m export_tools fetch-target linux-aarch64` unpacked
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import CpuVariantError
from .layout import model_dir
from .targets import target_torch

MODEL_DIR = model_dir("model")  # an AOTInductor package of one model, as aoti_compile_and_package writes it
_TRIPLETS = {"linux-aarch64": "aarch64-linux-gnu"}
# what the loader needs of inductor's C++ package; the rest (sources, build files, host objects) stays behind
_DROPPED_SUFFIXES = (".cpp", ".o", "_compile_flags.json", "_linker_flags.json", "CMakeLists.txt", "script.ld")


@dataclass(frozen=True)
class Toolchain:
    target: str
    cxx: str
    objcopy: str
    torch: Path | None  # the target's libtorch (None: not needed, a lite library)


def toolchain(target: str) -> Toolchain:
    """The cross compiler and the target's libtorch, checked; a CpuVariantError (TargetTorchError for the libtorch)
    says what is missing and how to provide it."""
    tc = compiler(target)
    return Toolchain(target=target, cxx=tc.cxx, objcopy=tc.objcopy, torch=target_torch(target))


def compiler(target: str) -> Toolchain:
    """The cross compiler and objcopy alone (a lite library needs no libtorch of the target), checked."""
    triplet = _TRIPLETS.get(target)
    if triplet is None:
        raise CpuVariantError(f"no cross toolchain for target {target} (expected one of {', '.join(_TRIPLETS)})")
    key = target.upper().replace("-", "_")
    cxx_name = os.environ.get(f"PT2RT_CXX_{key}", f"{triplet}-g++")
    cxx = shutil.which(cxx_name)
    if cxx is None:
        raise CpuVariantError(f"target {target} needs the C++ cross compiler {cxx_name} (apt-get install "
                              f"g++-{triplet}, or set PT2RT_CXX_{key})")
    objcopy = shutil.which(f"{triplet}-objcopy") or shutil.which(str(Path(cxx).with_name(f"{triplet}-objcopy")))
    if objcopy is None:
        raise CpuVariantError(f"target {target} needs {triplet}-objcopy (binutils-{triplet})")
    return Toolchain(target=target, cxx=cxx, objcopy=objcopy, torch=None)


def _run(cmd: list[str], what: str, cwd: Path) -> None:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if "error" in line.lower()]
        lines = lines or (result.stderr or result.stdout).strip().splitlines() or ["?"]
        raise CpuVariantError(f"{what} failed: {lines[0].strip()}")


def weights_object(host_object: Path, work: Path, tc: Toolchain) -> Path:
    """The weights of inductor's host object file (section .lrodata between _binary_constants_bin_start/_end),
    assembled again as an object of the target. The bytes are taken as they are."""
    blob = work / "constants.bin"
    host_objcopy = shutil.which("objcopy")
    if host_objcopy is None:
        raise CpuVariantError("the build machine's objcopy (binutils) is needed to read the weights object")
    _run([host_objcopy, "-O", "binary", "--only-section=.lrodata", str(host_object), str(blob)],
         "extracting the weights from the build machine's object", work)
    source = work / "constants.S"
    source.write_text(
        '\t.section .lrodata,"a"\n\t.balign 64\n'
        "\t.globl _binary_constants_bin_start\n_binary_constants_bin_start:\n"
        f'\t.incbin "{blob}"\n'
        "\t.globl _binary_constants_bin_end\n_binary_constants_bin_end:\n")
    obj = work / "constants.o"
    _run([tc.cxx, "-c", str(source), "-o", str(obj)], f"assembling the weights for {tc.target}", work)
    return obj


def build_library(records: dict[str, bytes], tc: Toolchain, arch_flags: tuple[str, ...]) -> tuple[str, bytes]:
    """Compile inductor's C++ package records (model folder relative names -> bytes) for the target.
    Returns the library's name (next to its .json, as the loader expects) and its bytes."""
    wrappers = [n for n in records if n.endswith(".wrapper.cpp")]
    if len(wrappers) != 1:
        raise CpuVariantError(f"expected one generated wrapper source, found {wrappers}")
    stem = wrappers[0][: -len(".cpp")]
    flags_name = stem + "_compile_flags.json"
    if flags_name not in records:
        raise CpuVariantError(f"inductor wrote no {flags_name}")
    flags = json.loads(records[flags_name])
    with tempfile.TemporaryDirectory(prefix="pt2rt-cross-") as tmp:
        work = Path(tmp)
        for name, data in records.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(data)
        defines = [f"-D{d.strip()}" for d in flags.get("definitions", []) if d.strip()]
        # the build machine's include paths (its torch, its Python) are replaced by the target's torch
        includes = ["-I", str(tc.torch / "include"), "-I", str(tc.torch / "include" / "torch" / "csrc" / "api" / "include")]
        cflags = [f"-{f}" for f in flags.get("cflags", []) if f and not f.startswith("march")]
        wrapper_obj = work / "wrapper.o"
        _run([tc.cxx, *defines, *includes, *cflags, *arch_flags, "-c", str(work / wrappers[0]), "-o", str(wrapper_obj)],
             f"compiling the model for {tc.target}", work)
        objects = [wrapper_obj]
        weights = [n for n in records if n.endswith(".weights.o")]
        if weights:
            objects.append(weights_object(work / weights[0], work, tc))
        library = work / (stem + ".so")
        lib = tc.torch / "lib"
        _run([tc.cxx, "-shared", "-fPIC", "-fopenmp", *[str(o) for o in objects], "-o", str(library),
              f"-L{lib}", f"-Wl,-rpath-link,{lib}:{tc.torch.parent / 'nvidia' / 'cu13' / 'lib'}",
              "-ltorch_cpu", "-lc10", "-Wl,--no-undefined"], f"linking the model for {tc.target}", work)
        stripped = work / "stripped.so"
        _run([tc.objcopy, "--strip-debug", str(library), str(stripped)], "stripping the model library", work)
        return stem + ".so", stripped.read_bytes()


def finish(cpp_package: Path, out: Path, tc: Toolchain, arch: str, arch_flags: tuple[str, ...]) -> None:
    """Write `out`: `cpp_package` (package_cpp_only) with its model built for the target, in a native compile's
    layout - the library named like its .json, the metadata naming the target machine, sources and build files left
    out."""
    from torch.export.pt2_archive._package import PT2ArchiveReader, PT2ArchiveWriter

    with PT2ArchiveReader(str(cpp_package)) as reader:
        names = [n for n in reader.get_file_names() if n != ".data/serialization_id"]
        records = {n: reader.read_bytes(n) for n in names}
    model = {n[len(MODEL_DIR):]: data for n, data in records.items() if n.startswith(MODEL_DIR)}
    lib_name, lib_bytes = build_library(model, tc, arch_flags)
    with PT2ArchiveWriter(str(out)) as writer:
        for name, data in records.items():
            if name.startswith(MODEL_DIR) and name.endswith(_DROPPED_SUFFIXES):
                continue
            if name.startswith(MODEL_DIR) and name.endswith("_metadata.json"):
                md = json.loads(data)
                md["AOTI_MACHINE"] = arch
                data = json.dumps(md).encode()
            writer.write_bytes(name, data)
        writer.write_bytes(MODEL_DIR + lib_name, lib_bytes)
