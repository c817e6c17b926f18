import os
import subprocess

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy

required_conan_version = ">=2.0"


class ZlibConan(ConanFile):
    """zlib under ConanCenter's names (find_package(ZLIB), ZLIB::ZLIB), repackaged from Debian's zlib1g-dev: nothing
    is built, Debian keeps it patched. pt2serve's gzip and deflate bodies."""

    name = "zlib"
    license = "Zlib"
    url = "https://zlib.net"
    description = "A compression library, from the distribution's package"
    package_type = "shared-library"
    settings = "os", "arch"
    upload_policy = "skip"

    def validate(self):
        if self.settings.os != "Linux" or str(self.settings.arch) != "x86_64":
            raise ConanInvalidConfiguration("zlib: Debian's x86_64 package only")

    def _check(self):
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", "zlib1g-dev"], capture_output=True,
                                 text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            out = ""
        status, _, version = out.partition("|")
        if "install ok installed" not in status:
            raise ConanInvalidConfiguration("zlib: Debian's zlib1g-dev is not installed (apt-get install zlib1g-dev)")
        if f":{self.version}" not in version:
            raise ConanInvalidConfiguration(f"zlib/{self.version}: zlib1g-dev is {version}")

    def build(self):
        self._check()

    def package(self):
        self._check()
        for header in ("zlib.h", "zconf.h"):
            copy(self, header, "/usr/include", os.path.join(self.package_folder, "include"))
        copy(self, "libz.so*", "/usr/lib/x86_64-linux-gnu", os.path.join(self.package_folder, "lib"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "ZLIB")
        self.cpp_info.set_property("cmake_target_name", "ZLIB::ZLIB")
        self.cpp_info.libs = ["z"]
