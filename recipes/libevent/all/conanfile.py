import os
import subprocess

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy

required_conan_version = ">=2.0"


class LibeventConan(ConanFile):
    """libevent 2.1 (event loop, evhttp, pthreads and OpenSSL bufferevents) under ConanCenter's names
    (find_package(Libevent), libevent::core, ::extra, ::pthreads, ::openssl), repackaged from Debian's libevent-dev:
    nothing is built, Debian keeps it patched. pt2serve's HTTP front (serve/http_server.cpp)."""

    name = "libevent"
    license = "BSD-3-Clause"
    url = "https://libevent.org"
    description = "An event notification library, from the distribution's package"
    package_type = "shared-library"
    settings = "os", "arch"
    upload_policy = "skip"
    _COMPONENTS = {"core": [], "extra": ["core"], "pthreads": ["core"], "openssl": ["core"]}

    def validate(self):
        if self.settings.os != "Linux" or str(self.settings.arch) != "x86_64":
            raise ConanInvalidConfiguration("libevent: Debian's x86_64 package only")

    def _check(self):
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", "libevent-dev"], capture_output=True,
                                 text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            out = ""
        status, _, version = out.partition("|")
        if "install ok installed" not in status:
            raise ConanInvalidConfiguration("libevent: Debian's libevent-dev is not installed (apt-get install libevent-dev)")
        if not version.startswith(f"{self.version}-"):
            raise ConanInvalidConfiguration(f"libevent/{self.version}: libevent-dev is {version}")

    def build(self):
        self._check()

    def package(self):
        self._check()
        copy(self, "*.h", "/usr/include/event2", os.path.join(self.package_folder, "include", "event2"))
        for component in self._COMPONENTS:
            copy(self, f"libevent_{component}*.so*", "/usr/lib/x86_64-linux-gnu", os.path.join(self.package_folder, "lib"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "Libevent")
        for component, requires in self._COMPONENTS.items():
            c = self.cpp_info.components[component]
            c.set_property("cmake_target_name", f"libevent::{component}")
            c.libs = [f"event_{component}"]
            c.requires = requires
            c.system_libs = ["pthread"] if component == "pthreads" else []
            if component == "openssl":
                c.system_libs = ["ssl", "crypto"]
