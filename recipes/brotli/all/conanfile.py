import os
import subprocess

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy

required_conan_version = ">=2.0"


class BrotliConan(ConanFile):
    """Brotli's decoder under ConanCenter's names (find_package(brotli), brotli::brotlidec), repackaged from Debian's
    libbrotli-dev: nothing is built, Debian keeps it patched. pt2serve's br bodies."""

    name = "brotli"
    license = "MIT"
    url = "https://github.com/google/brotli"
    description = "Brotli compression, from the distribution's package"
    package_type = "shared-library"
    settings = "os", "arch"
    upload_policy = "skip"

    def validate(self):
        if self.settings.os != "Linux" or str(self.settings.arch) != "x86_64":
            raise ConanInvalidConfiguration("brotli: Debian's x86_64 package only")

    def _check(self):
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", "libbrotli-dev"], capture_output=True,
                                 text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            out = ""
        status, _, version = out.partition("|")
        if "install ok installed" not in status:
            raise ConanInvalidConfiguration("brotli: Debian's libbrotli-dev is not installed (apt-get install libbrotli-dev)")
        if not version.startswith(f"{self.version}-"):
            raise ConanInvalidConfiguration(f"brotli/{self.version}: libbrotli-dev is {version}")

    def build(self):
        self._check()

    def package(self):
        self._check()
        copy(self, "*.h", "/usr/include/brotli", os.path.join(self.package_folder, "include", "brotli"))
        for lib in ("brotlicommon", "brotlidec"):
            copy(self, f"lib{lib}.so*", "/usr/lib/x86_64-linux-gnu", os.path.join(self.package_folder, "lib"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "brotli")
        common = self.cpp_info.components["brotlicommon"]
        common.set_property("cmake_target_name", "brotli::brotlicommon")
        common.libs = ["brotlicommon"]
        dec = self.cpp_info.components["brotlidec"]
        dec.set_property("cmake_target_name", "brotli::brotlidec")
        dec.libs = ["brotlidec"]
        dec.requires = ["brotlicommon"]
