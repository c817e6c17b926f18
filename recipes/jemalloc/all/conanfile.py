import os
import subprocess

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy

required_conan_version = ">=2.0"


class JemallocConan(ConanFile):
    """jemalloc 5.3 as a static library under ConanCenter's names (find_package(jemalloc), jemalloc::jemalloc),
    repackaged from Debian's libjemalloc-dev (its position-independent archive): nothing is built, Debian keeps it
    patched. pt2run's and pt2serve's malloc (runtime/cli/allocator.cpp); libpt2rt itself leaves the allocator to the
    process that embeds it."""

    name = "jemalloc"
    license = "BSD-2-Clause"
    url = "https://jemalloc.net"
    description = "A general purpose malloc(3) implementation, from the distribution's package"
    package_type = "static-library"
    settings = "os", "arch"
    upload_policy = "skip"

    def validate(self):
        if self.settings.os != "Linux" or str(self.settings.arch) != "x86_64":
            raise ConanInvalidConfiguration("jemalloc: Debian's x86_64 package only")

    def _check(self):
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", "libjemalloc-dev"],
                                 capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            out = ""
        status, _, version = out.partition("|")
        if "install ok installed" not in status:
            raise ConanInvalidConfiguration(
                "jemalloc: Debian's libjemalloc-dev is not installed (apt-get install libjemalloc-dev)")
        if not version.startswith(f"{self.version}-"):
            raise ConanInvalidConfiguration(f"jemalloc/{self.version}: libjemalloc-dev is {version}")

    def build(self):
        self._check()

    def package(self):
        self._check()
        copy(self, "jemalloc.h", "/usr/include/jemalloc", os.path.join(self.package_folder, "include", "jemalloc"))
        copy(self, "libjemalloc_pic.a", "/usr/lib/x86_64-linux-gnu", os.path.join(self.package_folder, "lib"))
        copy(self, "copyright", "/usr/share/doc/libjemalloc-dev", os.path.join(self.package_folder, "licenses"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "jemalloc")
        self.cpp_info.set_property("cmake_target_name", "jemalloc::jemalloc")
        self.cpp_info.libs = ["jemalloc_pic"]
        self.cpp_info.system_libs = ["pthread", "dl", "m"]
