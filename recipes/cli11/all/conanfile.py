import os
import re

from conan import ConanFile
from conan.tools.files import copy, get, load
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class CLI11Conan(ConanFile):
    """CLI11 (header-only) under ConanCenter's name and target CLI11::CLI11. Takes the headers from a
    local install of the same version when there is one (Debian's libcli11-dev), else from upstream."""

    name = "cli11"
    license = "BSD-3-Clause"
    url = "https://github.com/CLIUtils/CLI11"
    description = "A command line parser for C++11 and beyond"
    package_type = "header-library"
    no_copy_source = True

    def layout(self):
        basic_layout(self, src_folder="src")

    def package_id(self):
        self.info.clear()

    def _local_include(self):
        root = self.conan_data.get("local_headers", {}).get(self.version)
        header = os.path.join(root or "", "CLI", "Version.hpp")
        if not root or not os.path.isfile(header):
            return None
        found = re.search(r'#define\s+CLI11_VERSION\s+"([0-9.]+)"', load(self, header))
        return root if found and found.group(1) == self.version else None

    def source(self):
        local = self._local_include()
        if local:
            self.output.info(f"using the local headers in {local}")
            copy(self, "*", os.path.join(local, "CLI"), os.path.join(self.source_folder, "include", "CLI"))
        else:
            get(self, **self.conan_data["sources"][self.version], strip_root=True)

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "CLI11")
        self.cpp_info.set_property("cmake_target_name", "CLI11::CLI11")
        self.cpp_info.set_property("pkg_config_name", "CLI11")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
