import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import copy, load

required_conan_version = ">=2.0"

_TRIPLETS = {"x86_64": "x86_64-linux-gnu", "armv8": "aarch64-linux-gnu"}


class OpenSSLConan(ConanFile):
    """OpenSSL 3.0's libcrypto under ConanCenter's names (OpenSSL::Crypto), repackaged from Debian's libssl-dev for the
    host arch: on a cross build, the multiarch package (libssl-dev:arm64 for armv8), which scripts/bootstrap.sh
    installs. Nothing is built: Debian keeps it patched."""

    name = "openssl"
    license = "Apache-2.0"
    url = "https://www.openssl.org"
    description = "OpenSSL's libcrypto, from the distribution's package"
    package_type = "shared-library"
    settings = "os", "arch"
    upload_policy = "skip"

    def _triplet(self):
        return _TRIPLETS.get(str(self.settings.arch))

    def validate(self):
        if self.settings.os != "Linux" or self._triplet() is None:
            raise ConanInvalidConfiguration(f"openssl: Debian's package for Linux {', '.join(_TRIPLETS)} only")

    def _dirs(self):
        triplet = self._triplet()
        lib = f"/usr/lib/{triplet}"
        arch_include = f"/usr/include/{triplet}/openssl"
        if not os.path.isfile(os.path.join(lib, "libcrypto.so")) or not os.path.isdir(arch_include):
            deb_arch = {"x86_64": "amd64", "armv8": "arm64"}[str(self.settings.arch)]
            raise ConanInvalidConfiguration(f"openssl: Debian's libssl-dev:{deb_arch} is not installed "
                                            f"(no {lib}/libcrypto.so or {arch_include})")
        found = re.search(r"#\s*define\s+OPENSSL_VERSION_TEXT\s+\"OpenSSL (\d+)\.(\d+)",
                          load(self, "/usr/include/openssl/opensslv.h") if os.path.isfile("/usr/include/openssl/opensslv.h")
                          else load(self, os.path.join(arch_include, "opensslv.h")))
        if not found or f"{found.group(1)}.{found.group(2)}" != str(self.version):
            raise ConanInvalidConfiguration(f"openssl/{self.version}: the installed libssl-dev is another version")
        return lib, arch_include

    def build(self):
        self._dirs()

    def package(self):
        lib, arch_include = self._dirs()
        include = os.path.join(self.package_folder, "include", "openssl")
        copy(self, "*.h", "/usr/include/openssl", include)
        copy(self, "*.h", arch_include, include)  # configuration.h, opensslconf.h of this arch
        copy(self, "libcrypto.so*", lib, os.path.join(self.package_folder, "lib"))
        copy(self, "libssl.so*", lib, os.path.join(self.package_folder, "lib"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "OpenSSL")
        self.cpp_info.set_property("cmake_find_mode", "both")
        crypto = self.cpp_info.components["crypto"]
        crypto.set_property("cmake_target_name", "OpenSSL::Crypto")
        crypto.libs = ["crypto"]
        crypto.system_libs = ["dl", "pthread"]
        ssl = self.cpp_info.components["ssl"]
        ssl.set_property("cmake_target_name", "OpenSSL::SSL")
        ssl.libs = ["ssl"]
        ssl.requires = ["crypto"]
