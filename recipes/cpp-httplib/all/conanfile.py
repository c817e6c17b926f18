import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy, load
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class CppHttplibConan(ConanFile):
    """cpp-httplib (HTTP/1.1 server and client) under ConanCenter's name and target httplib::httplib, repackaged
    from Debian's libcpp-httplib-dev (kept patched by Debian security). Debian builds it as a library
    (libcpp-httplib.so.0.11, with OpenSSL, zlib and brotli): its header declares, the library defines, and the
    consumer must compile with the same CPPHTTPLIB_* switches (the class layouts depend on them)."""

    name = "cpp-httplib"
    license = "MIT"
    url = "https://github.com/yhirose/cpp-httplib"
    description = "A C++ HTTP/HTTPS server and client library"
    package_type = "shared-library"
    settings = "os", "arch"
    no_copy_source = True
    upload_policy = "skip"
    _DEFINES = ["CPPHTTPLIB_OPENSSL_SUPPORT", "CPPHTTPLIB_ZLIB_SUPPORT", "CPPHTTPLIB_BROTLI_SUPPORT"]

    def layout(self):
        basic_layout(self, src_folder="src")

    def _libdir(self):
        triplet = {"x86_64": "x86_64-linux-gnu", "armv8": "aarch64-linux-gnu"}.get(str(self.settings.arch), "")
        return f"/usr/lib/{triplet}"

    def _local_include(self):
        root = self.conan_data.get("local_headers", {}).get(self.version)
        header = os.path.join(root or "", "httplib.h")
        if not root or not os.path.isfile(header):
            return None
        found = re.search(r'#define\s+CPPHTTPLIB_VERSION\s+"([0-9.]+)"', load(self, header))
        return root if found and found.group(1) == self.version else None

    def source(self):
        local = self._local_include()
        if local:
            self.output.info(f"using the local header in {local}")
            copy(self, "httplib.h", local, os.path.join(self.source_folder))
        else:
            raise ConanInvalidConfiguration(f"cpp-httplib/{self.version}: /usr/include/httplib.h of that version is not "
                                            "installed (apt-get install libcpp-httplib-dev)")

    def package(self):
        copy(self, "httplib.h", self.source_folder, os.path.join(self.package_folder, "include"))
        libdir = self._libdir()
        if not os.path.isfile(os.path.join(libdir, "libcpp-httplib.so")):
            raise ConanInvalidConfiguration(f"cpp-httplib/{self.version}: no {libdir}/libcpp-httplib.so "
                                            "(apt-get install libcpp-httplib-dev for this arch)")
        copy(self, "libcpp-httplib.so*", libdir, os.path.join(self.package_folder, "lib"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "httplib")
        self.cpp_info.set_property("cmake_target_name", "httplib::httplib")
        self.cpp_info.bindirs = []
        self.cpp_info.libs = ["cpp-httplib"]
        self.cpp_info.defines = self._DEFINES
        self.cpp_info.system_libs = ["pthread"]
