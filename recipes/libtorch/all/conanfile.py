import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile

from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration
from conan.tools.files import copy

required_conan_version = ">=2.0"

# Libraries of the wheel that a pure C++ consumer must not get: they need libpython, or are torch's tests.
_EXCLUDED_LIBS = ["libtorch_python.so", "libshm.so", "libshm*", "libjitbackend_test.so",
                  "libbackend_with_compiler.so", "libtorchbind_test.so", "libaoti_custom_ops.so"]


def _mirror(src, dst, excludes=()):
    """Copy a tree, hard-linking files where the file system allows: a wheel's libraries are GBs."""
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, pattern) for pattern in excludes)]
        rel = os.path.relpath(root, src)
        for name in files:
            if any(fnmatch.fnmatch(name, pattern) for pattern in excludes):
                continue
            target_dir = os.path.join(dst, rel)
            os.makedirs(target_dir, exist_ok=True)
            source, target = os.path.join(root, name), os.path.join(target_dir, name)
            if os.path.lexists(target):
                os.remove(target)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
                continue
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)


# linux-aarch64 (arch=armv8): PyPI's aarch64 torch wheel is its CUDA build (there is no +cpu one). A CPU-only libtorch is
# taken from it - libtorch_cpu, libc10 and what they NEED - plus the two CUDA runtime libraries libtorch_cpu.so NEEDS
# (they load with no GPU and no driver); never libtorch_cuda.so. The wheels are read from LIBTORCH_WHEELS_DIR
# (scripts/bootstrap.sh TARGET=linux-aarch64 downloads them) and checked against conandata.yml.
_AARCH64_TORCH_LIBS = ["libtorch_cpu.so", "libc10.so", "libgomp.so.1", "libarm_compute.so", "libarm_compute_graph.so",
                       "libnvpl_blas_core.so.0", "libnvpl_blas_lp64_gomp.so.0", "libnvpl_lapack_core.so.0",
                       "libnvpl_lapack_lp64_gomp.so.0"]
_AARCH64_CUDA_LIBS = ["libcudart.so.13", "libcupti.so.13"]

# Imported targets of a CPU-only libtorch for the cross build (the wheel's own TorchConfig.cmake insists on CUDA):
# export_tools' templates, which its fetch-target writes too; exported with the recipe (export()).
_CMAKE_TEMPLATES = os.path.join("..", "..", "..", "export_tools", "cmake")
_CMAKE_FILES = ("TorchConfig.cmake", "TorchConfigVersion.cmake")


class LibtorchConan(ConanFile):
    """libtorch taken from an installed torch wheel (its include/, lib/ without the Python parts, and
    share/cmake/). Consumers use torch's own `find_package(Torch)`.

    The package keeps the wheel's layout (torch/..., and for CUDA nvidia/<component>/lib next to it),
    because torch's CUDA libraries find the NVIDIA libraries through RPATH $ORIGIN/../../nvidia/...

    The wheel is found through the environment variable LIBTORCH_WHEEL_DIR (the `torch` package folder),
    else by importing torch with the Python that runs Conan. Its version must be this recipe's version,
    and it must have CUDA exactly when the option `cuda` is True."""

    name = "libtorch"
    license = "BSD-3-Clause"
    url = "https://pytorch.org"
    description = "PyTorch's C++ library, repackaged from an installed wheel"
    package_type = "shared-library"
    settings = "os", "arch"
    options = {"cuda": [True, False]}
    default_options = {"cuda": False}
    upload_policy = "skip"

    def export(self):
        source = os.path.join(self.recipe_folder, _CMAKE_TEMPLATES)
        for name in _CMAKE_FILES:
            if not os.path.isfile(os.path.join(source, f"{name}.in")):
                raise ConanException(f"libtorch recipe: {name}.in is not in {os.path.normpath(source)} (the recipe is "
                                     f"exported from pt2rt's recipes/ folder, beside export_tools/)")
        copy(self, "*.cmake.in", source, os.path.join(self.export_folder, "cmake"))

    def _wheel(self):
        code = ("import json, os, torch; print(json.dumps({'dir': os.path.dirname(torch.__file__), "
                "'version': torch.__version__, 'cuda': torch.version.cuda}))")
        env_dir = os.environ.get("LIBTORCH_WHEEL_DIR")
        cmd = [sys.executable, "-c", code]
        if env_dir:
            cmd = [sys.executable, "-c", f"import sys; sys.path.insert(0, {os.path.dirname(env_dir)!r}); {code}"]
        try:
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise ConanInvalidConfiguration(
                f"libtorch/{self.version}: no torch wheel found with {sys.executable} "
                f"(LIBTORCH_WHEEL_DIR={env_dir!r}): {getattr(e, 'stderr', e)}")
        info = json.loads(out.strip().splitlines()[-1])
        if info["version"].split("+")[0] != str(self.version):
            raise ConanInvalidConfiguration(
                f"libtorch/{self.version}: the torch wheel at {info['dir']} is version {info['version']}")
        if bool(info["cuda"]) != bool(self.options.cuda):
            raise ConanInvalidConfiguration(
                f"libtorch/{self.version}: option cuda={self.options.cuda}, but the torch wheel at {info['dir']} "
                f"has CUDA {info['cuda']}")
        return info

    def _aarch64_wheels(self):
        """The aarch64 wheels of conandata.yml, found in LIBTORCH_WHEELS_DIR and checked by SHA-256."""
        folder = os.environ.get("LIBTORCH_WHEELS_DIR")
        wanted = self.conan_data.get("aarch64_wheels", {}).get(str(self.version))
        if not wanted:
            raise ConanInvalidConfiguration(f"libtorch/{self.version}: no aarch64 wheels listed in conandata.yml")
        if not folder or not os.path.isdir(folder):
            raise ConanInvalidConfiguration(
                f"libtorch/{self.version} for armv8 needs LIBTORCH_WHEELS_DIR, a folder with "
                f"{', '.join(w['file'] for w in wanted)} (got {folder!r}; scripts/bootstrap.sh with "
                f"TARGET=linux-aarch64 downloads them)")
        paths = {}
        for w in wanted:
            path = os.path.join(folder, w["file"])
            if not os.path.isfile(path):
                raise ConanInvalidConfiguration(f"libtorch/{self.version}: {path} is missing")
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            if digest.hexdigest() != w["sha256"]:
                raise ConanInvalidConfiguration(f"libtorch/{self.version}: {path} has SHA-256 {digest.hexdigest()}, "
                                                f"expected {w['sha256']}")
            paths[w["name"]] = path
        return paths

    def validate(self):
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration("libtorch: this recipe repackages a Linux wheel")
        if self.settings.arch not in ("x86_64", "armv8"):
            raise ConanInvalidConfiguration(f"libtorch: arch {self.settings.arch} is not packaged (x86_64, armv8)")
        if self.settings.arch == "armv8" and self.options.cuda:
            raise ConanInvalidConfiguration("libtorch: armv8 is packaged CPU-only (cuda=False)")

    def build(self):
        if self.settings.arch == "armv8":
            self._aarch64_wheels()
        else:
            self._wheel()  # fail early, with the reason

    def _package_aarch64(self):
        wheels = self._aarch64_wheels()
        dst = os.path.join(self.package_folder, "torch")
        with zipfile.ZipFile(wheels["torch"]) as zf:
            names = zf.namelist()
            for name in names:
                if name.startswith("torch/include/") and not name.endswith("/"):
                    zf.extract(name, self.package_folder)
            for lib in _AARCH64_TORCH_LIBS:
                zf.extract(f"torch/lib/{lib}", self.package_folder)
            license_name = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
            os.makedirs(os.path.join(self.package_folder, "licenses"), exist_ok=True)
            with open(os.path.join(self.package_folder, "licenses", "LICENSE"), "wb") as f:
                f.write(zf.read(license_name))
        cuda_dir = os.path.join(self.package_folder, "nvidia", "cu13", "lib")
        for key in ("cuda_runtime", "cuda_cupti"):
            with zipfile.ZipFile(wheels[key]) as zf:
                for lib in _AARCH64_CUDA_LIBS:
                    if f"nvidia/cu13/lib/{lib}" in zf.namelist():
                        zf.extract(f"nvidia/cu13/lib/{lib}", self.package_folder)
        for lib in _AARCH64_CUDA_LIBS:
            if not os.path.isfile(os.path.join(cuda_dir, lib)):
                raise ConanInvalidConfiguration(f"libtorch/{self.version}: {lib} is in none of the aarch64 wheels")
        for root, _, files in os.walk(self.package_folder):
            for f in files:
                if ".so" in f:
                    os.chmod(os.path.join(root, f), 0o755)
        cmake_dir = os.path.join(dst, "share", "cmake", "Torch")
        os.makedirs(cmake_dir, exist_ok=True)
        for name in _CMAKE_FILES:
            with open(os.path.join(self.recipe_folder, "cmake", f"{name}.in")) as f:
                text = f.read()
            with open(os.path.join(cmake_dir, name), "w") as f:
                f.write(text.replace("@VERSION@", str(self.version)))

    def package(self):
        if self.settings.arch == "armv8":
            self._package_aarch64()
            return
        src = self._wheel()["dir"]
        dst = os.path.join(self.package_folder, "torch")
        _mirror(os.path.join(src, "include"), os.path.join(dst, "include"))
        _mirror(os.path.join(src, "lib"), os.path.join(dst, "lib"), excludes=_EXCLUDED_LIBS)
        _mirror(os.path.join(src, "share", "cmake"), os.path.join(dst, "share", "cmake"))
        if self.options.cuda:
            nvidia = os.path.join(os.path.dirname(src), "nvidia")
            for component in sorted(os.listdir(nvidia)) if os.path.isdir(nvidia) else []:
                libdir = os.path.join(nvidia, component, "lib")
                if os.path.isdir(libdir):
                    _mirror(libdir, os.path.join(self.package_folder, "nvidia", component, "lib"))
        copy(self, "LICENSE", os.path.dirname(src), os.path.join(self.package_folder, "licenses"), keep_path=False)

    def package_info(self):
        # torch's own TorchConfig.cmake, found through CMAKE_PREFIX_PATH; CMakeDeps generates nothing.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.set_property("cmake_file_name", "Torch")
        self.cpp_info.builddirs = ["torch/share/cmake/Torch"]
        self.cpp_info.includedirs = ["torch/include", "torch/include/torch/csrc/api/include"]
        self.cpp_info.libdirs = ["torch/lib"]
        if self.settings.arch == "armv8":
            self.cpp_info.libs = ["torch_cpu", "c10"]
        else:
            self.cpp_info.libs = ["torch", "torch_cpu", "c10"] + (["torch_cuda", "c10_cuda"] if self.options.cuda else [])
        self.runenv_info.prepend_path("LD_LIBRARY_PATH", os.path.join(self.package_folder, "torch", "lib"))
