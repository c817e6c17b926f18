import os
import sys

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load

required_conan_version = ">=2.0"

# torch version of each flavour: the CPU wheel and the CUDA 13 wheel this project is built and tested with.
TORCH_VERSIONS = {"cpu": "2.13.0", "cuda": "2.14.1"}


class Pt2rtConan(ConanFile):
    name = "pt2rt"
    exports = ("VERSION",)
    license = "BSD-3-Clause"
    description = ("Ship PyTorch models with custom C++/CUDA operators to pure C++ programs: the pt2rt runtime "
                   "(libpt2rt.so, pt2run), pt2rt_add_ops_library for ops libraries, and the example ops library")
    package_type = "shared-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"flavour": ["cpu", "cuda"], "with_tests": [True, False]}
    # with_tests: this repository's own build (make build) turns them on; a package needs none of them.
    default_options = {"flavour": "cpu", "with_tests": False}
    exports_sources = ("CMakeLists.txt", "VERSION", "ops/*", "runtime/*", "serve/*", "benchmarks/*", "cmake/*", "tests/*")

    def set_version(self):
        self.version = load(self, os.path.join(self.recipe_folder, "VERSION")).strip()

    def requirements(self):
        flavour = str(self.options.flavour)
        self.requires(f"libtorch/{TORCH_VERSIONS[flavour]}", options={"cuda": flavour == "cuda"})
        self.requires("cli11/2.1.2")
        self.requires("nlohmann_json/3.11.2")
        if not self._cross:
            # pt2serve's (built natively only): private to the executable, not a consumer's dependency
            self.requires("libevent/2.1.12", visible=False)
            self.requires("zlib/1.2.13", visible=False)
            self.requires("brotli/1.0.9", visible=False)
            self.requires("grpc/1.51.1", visible=False)
            self.requires("jemalloc/5.3.0", visible=False)  # pt2run's and pt2serve's malloc
        if self._cross:
            self.requires("openssl/3.0")  # Debian's multiarch package for the target; natively: the system's
        if self.options.with_tests:
            self.test_requires("gtest/1.12.1")
            if not self._cross:  # benchmarks run natively only
                self.test_requires("benchmark/1.7.1")

    @property
    def _cross(self):
        return str(self.settings.arch) != "x86_64"

    def validate(self):
        if self._cross and (str(self.settings.arch) != "armv8" or self.options.flavour != "cpu"):
            raise ConanInvalidConfiguration(f"pt2rt builds for x86_64 (cpu, cuda) and armv8 (cpu); got arch "
                                            f"{self.settings.arch}, flavour {self.options.flavour}")

    @property
    def flavour(self):
        # the build folder's first word: the flavour natively, the target arch for a cross build
        return "aarch64" if str(self.settings.arch) == "armv8" else str(self.options.flavour)

    def layout(self):
        # build/<flavour>-<build type>, presets conan-<flavour>-<build type> (aarch64-release for linux-aarch64)
        self.folders.build_folder_vars = ["self.flavour", "settings.build_type"]
        cmake_layout(self)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["PT2RT_OPS_CUDA"] = "ON" if self.options.flavour == "cuda" else "OFF"
        tc.cache_variables["PT2RT_BUILD_TESTS"] = bool(self.options.with_tests)
        # pt2rt-lite is not part of this package (make lite builds it); the project's own build turns it on
        tc.cache_variables["PT2RT_BUILD_LITE"] = bool(self.options.with_tests)
        # the venv's Python (it runs Conan): exports the packages the C++ tests run
        tc.cache_variables["PT2RT_PYTHON"] = sys.executable
        tc.generate()
        CMakeDeps(self).generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        CMake(self).install()
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))

    def package_info(self):
        # consumers: find_package(pt2rt) -> pt2rt::pt2rt (libpt2rt.so, <pt2rt/pt2rt.h>); pt2run in bin/;
        # libidentity_conv_ops.so in lib/, where the runtime looks for ops libraries
        self.cpp_info.set_property("cmake_file_name", "pt2rt")
        self.cpp_info.set_property("cmake_target_name", "pt2rt::pt2rt")
        # pt2rt_add_ops_library(NAME SOURCES ...), as find_package(pt2rt) gives it from an install
        self.cpp_info.set_property("cmake_build_modules", [os.path.join("lib", "cmake", "pt2rt", "pt2rtOpsLibrary.cmake")])
        self.cpp_info.libs = ["pt2rt"]
        # <pt2rt/pt2rt.h> is torch-free: linking pt2rt::pt2rt brings no torch target (libpt2rt.so finds libtorch at
        # run time; an ops library build does find_package(Torch) itself, from libtorch's build dirs).
        self.cpp_info.requires = ["nlohmann_json::nlohmann_json"]
        self.cpp_info.ignored_requires = ["libtorch", "cli11"]
        # ...but the linker must find libpt2rt.so's own libtorch dependencies (its RUNPATH is $ORIGIN)
        torch_lib = os.path.join(self.dependencies["libtorch"].package_folder, "torch", "lib")
        self.cpp_info.exelinkflags = self.cpp_info.sharedlinkflags = [f"-Wl,-rpath-link,{torch_lib}"]
        self.cpp_info.libdirs = ["lib"]
        self.cpp_info.bindirs = ["bin"]
        self.cpp_info.includedirs = ["include"]
        self.runenv_info.prepend_path("PT2RT_OPS_PATH", os.path.join(self.package_folder, "lib"))
