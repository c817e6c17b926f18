import os
import re

from conan import ConanFile
from conan.tools.files import copy, get, load
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class NlohmannJsonConan(ConanFile):
    """nlohmann_json (header-only) under ConanCenter's name and target nlohmann_json::nlohmann_json.
    Takes the headers from a local install of the same version when there is one (Debian's
    nlohmann-json3-dev), else from upstream."""

    name = "nlohmann_json"
    license = "MIT"
    url = "https://github.com/nlohmann/json"
    description = "JSON for Modern C++"
    package_type = "header-library"
    no_copy_source = True

    def layout(self):
        basic_layout(self, src_folder="src")

    def package_id(self):
        self.info.clear()

    def _local_include(self):
        root = self.conan_data.get("local_headers", {}).get(self.version)
        # 3.11 defines the version in detail/abi_macros.hpp, older releases in json.hpp.
        headers = [os.path.join(root or "", "nlohmann", *p) for p in (("detail", "abi_macros.hpp"), ("json.hpp",))]
        headers = [h for h in headers if os.path.isfile(h)]
        if not root or not headers:
            return None
        text = "".join(load(self, h) for h in headers)
        parts = [re.search(rf"#define\s+NLOHMANN_JSON_VERSION_{p}\s+([0-9]+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
        if not all(parts):
            return None
        return root if ".".join(m.group(1) for m in parts) == self.version else None

    def source(self):
        local = self._local_include()
        if local:
            self.output.info(f"using the local headers in {local}")
            copy(self, "*", os.path.join(local, "nlohmann"), os.path.join(self.source_folder, "include", "nlohmann"))
        else:
            get(self, **self.conan_data["sources"][self.version], strip_root=True)

    def package(self):
        copy(self, "LICENSE*", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "nlohmann_json")
        self.cpp_info.set_property("cmake_target_name", "nlohmann_json::nlohmann_json")
        self.cpp_info.set_property("pkg_config_name", "nlohmann_json")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
