import subprocess

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration

required_conan_version = ">=2.0"

# Debian 12's packages of this gRPC and the protobuf it is built with.
_DEBIAN_PACKAGES = {"libgrpc++-dev": "1.51.1", "protobuf-compiler-grpc": "1.51.1", "libprotobuf-dev": "3.21.12",
                    "protobuf-compiler": "3.21.12"}


class GrpcConan(ConanFile):
    """gRPC C++ with protobuf, from Debian's packages (a system recipe, like ConanCenter's */system ones): building
    gRPC from source takes an hour and needs the network; Debian's are patched by Debian security. It checks the
    packages and their versions; consumers use gRPC's own CMake config (gRPC::grpc++, protobuf::libprotobuf through
    FindProtobuf) and the code generators protoc and grpc_cpp_plugin from PATH."""

    name = "grpc"
    license = "Apache-2.0"
    url = "https://grpc.io"
    description = "gRPC C++ and protobuf, the distribution's packages"
    package_type = "shared-library"
    settings = "os", "arch"
    upload_policy = "skip"

    def _installed(self, package):
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", package], capture_output=True,
                                 text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
        status, _, version = out.partition("|")
        return version if "install ok installed" in status else None

    def validate(self):
        if self.settings.os != "Linux" or str(self.settings.arch) != "x86_64":
            raise ConanInvalidConfiguration("grpc: Debian's x86_64 packages only")

    def build(self):
        for package, version in _DEBIAN_PACKAGES.items():
            have = self._installed(package)
            if have is None:
                raise ConanInvalidConfiguration(f"grpc/{self.version}: Debian package {package} is not installed "
                                                f"(apt-get install {' '.join(_DEBIAN_PACKAGES)})")
            if not have.startswith(version):
                raise ConanInvalidConfiguration(f"grpc/{self.version}: {package} is {have}, expected {version}")

    def package_info(self):
        # gRPC's own config (/usr/lib/<triplet>/cmake/grpc) is found by find_package(gRPC CONFIG)
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.includedirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.bindirs = []
