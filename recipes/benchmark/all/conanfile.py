import os
import re

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, get, load, rmdir

required_conan_version = ">=2.0"


class BenchmarkConan(ConanFile):
    """Google Benchmark under ConanCenter's name and targets (benchmark::benchmark,
    benchmark::benchmark_main). Repackages a local install of the same version when there is one
    (Debian's libbenchmark-dev), else builds the upstream release."""

    name = "benchmark"
    license = "Apache-2.0"
    url = "https://github.com/google/benchmark"
    description = "A microbenchmark support library"
    package_type = "library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"shared": [True, False], "fPIC": [True, False]}
    default_options = {"shared": False, "fPIC": True}

    def layout(self):
        cmake_layout(self, src_folder="src")

    def _local(self):
        paths = self.conan_data.get("local_install", {}).get(self.version)
        if not paths:
            return None
        version_file = os.path.join(paths["lib"], "cmake", "benchmark", "benchmarkConfigVersion.cmake")
        if not os.path.isfile(version_file) or not os.path.isdir(os.path.join(paths["include"], "benchmark")):
            return None
        found = re.search(r'set\(PACKAGE_VERSION "([0-9.]+)"\)', load(self, version_file))
        return paths if found and found.group(1) == self.version else None

    def source(self):
        if not self._local():
            get(self, **self.conan_data["sources"][self.version], strip_root=True)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["BENCHMARK_ENABLE_TESTING"] = False
        tc.cache_variables["BENCHMARK_ENABLE_GTEST_TESTS"] = False
        tc.cache_variables["BENCHMARK_ENABLE_WERROR"] = False
        tc.cache_variables["BENCHMARK_ENABLE_LTO"] = False
        tc.generate()

    def build(self):
        if self._local():
            self.output.info("using the local prebuilt library")
            return
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        local = self._local()
        if local:
            copy(self, "*", os.path.join(local["include"], "benchmark"), os.path.join(self.package_folder, "include", "benchmark"))
            copy(self, "libbenchmark.so*", local["lib"], os.path.join(self.package_folder, "lib"))
            copy(self, "libbenchmark_main.a", local["lib"], os.path.join(self.package_folder, "lib"))
            return
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        CMake(self).install()
        rmdir(self, os.path.join(self.package_folder, "lib", "cmake"))
        rmdir(self, os.path.join(self.package_folder, "lib", "pkgconfig"))
        rmdir(self, os.path.join(self.package_folder, "share"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "benchmark")
        lib = self.cpp_info.components["_benchmark"]
        lib.set_property("cmake_target_name", "benchmark::benchmark")
        lib.set_property("pkg_config_name", "benchmark")
        lib.libs = ["benchmark"]
        if self.settings.os in ("Linux", "FreeBSD"):
            lib.system_libs = ["pthread", "rt", "m"]
        main = self.cpp_info.components["benchmark_main"]
        main.set_property("cmake_target_name", "benchmark::benchmark_main")
        main.libs = ["benchmark_main"]
        main.requires = ["_benchmark"]
