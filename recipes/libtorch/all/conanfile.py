import fnmatch
import json
import os
import shutil
import subprocess
import sys

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
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

    def validate(self):
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration("libtorch: this recipe repackages a Linux wheel")

    def build(self):
        self._wheel()  # fail early, with the reason

    def package(self):
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
        self.cpp_info.libs = ["torch", "torch_cpu", "c10"] + (["torch_cuda", "c10_cuda"] if self.options.cuda else [])
        self.runenv_info.prepend_path("LD_LIBRARY_PATH", os.path.join(self.package_folder, "torch", "lib"))
