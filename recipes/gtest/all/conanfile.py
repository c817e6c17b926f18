import os
import re

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, get, load, rmdir

required_conan_version = ">=2.0"


class GTestConan(ConanFile):
    """Google Test under ConanCenter's name and targets (GTest::gtest, GTest::gtest_main, GTest::gmock,
    GTest::gmock_main). Builds from a local copy of the same version's source when there is one
    (Debian's googletest package), else from the upstream release."""

    name = "gtest"
    license = "BSD-3-Clause"
    url = "https://github.com/google/googletest"
    description = "Google's C++ test framework"
    package_type = "library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"shared": [True, False], "fPIC": [True, False], "build_gmock": [True, False],
               "no_main": [True, False]}
    default_options = {"shared": False, "fPIC": True, "build_gmock": True, "no_main": False}

    def layout(self):
        cmake_layout(self, src_folder="src")

    def _local_source(self):
        path = self.conan_data.get("local_sources", {}).get(self.version)
        if not path or not os.path.isfile(os.path.join(path, "CMakeLists.txt")):
            return None
        found = re.search(r"GOOGLETEST_VERSION\s+([0-9.]+)", load(self, os.path.join(path, "CMakeLists.txt")))
        return path if found and found.group(1) == self.version else None

    def source(self):
        local = self._local_source()
        if local:
            self.output.info(f"using the local source tree {local}")
            copy(self, "*", local, self.source_folder)
        else:
            get(self, **self.conan_data["sources"][self.version], strip_root=True)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["BUILD_GMOCK"] = bool(self.options.build_gmock)
        tc.cache_variables["INSTALL_GTEST"] = True
        tc.cache_variables["gtest_force_shared_crt"] = False
        tc.cache_variables["CMAKE_POLICY_DEFAULT_CMP0077"] = "NEW"
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        CMake(self).install()
        rmdir(self, os.path.join(self.package_folder, "lib", "cmake"))
        rmdir(self, os.path.join(self.package_folder, "lib", "pkgconfig"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "GTest")
        gtest = self.cpp_info.components["libgtest"]
        gtest.set_property("cmake_target_name", "GTest::gtest")
        gtest.set_property("cmake_target_aliases", ["GTest::GTest"])
        gtest.set_property("pkg_config_name", "gtest")
        gtest.libs = ["gtest"]
        if self.settings.os in ("Linux", "FreeBSD"):
            gtest.system_libs = ["m", "pthread"]
        if not self.options.no_main:
            main = self.cpp_info.components["gtest_main"]
            main.set_property("cmake_target_name", "GTest::gtest_main")
            main.set_property("cmake_target_aliases", ["GTest::Main"])
            main.libs = ["gtest_main"]
            main.requires = ["libgtest"]
        if self.options.build_gmock:
            gmock = self.cpp_info.components["gmock"]
            gmock.set_property("cmake_target_name", "GTest::gmock")
            gmock.libs = ["gmock"]
            gmock.requires = ["libgtest"]
            if not self.options.no_main:
                gmock_main = self.cpp_info.components["gmock_main"]
                gmock_main.set_property("cmake_target_name", "GTest::gmock_main")
                gmock_main.libs = ["gmock_main"]
                gmock_main.requires = ["gmock"]
