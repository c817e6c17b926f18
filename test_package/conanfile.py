"""Conan's test of the pt2rt package, as a consumer uses it: build a small ops library with pt2rt_add_ops_library
and a program linking pt2rt::pt2rt, export a model calling that op (Python, the Python running Conan, with
export_tools), and run the package with the program - verify, then one run checked against the op's formula."""

import os
import subprocess
import sys

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class Pt2rtTestPackage(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps", "CMakeToolchain", "VirtualRunEnv"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if not can_run(self):
            return
        library = os.path.join(self.cpp.build.bindir, "libtp_ops.so")
        package = os.path.join(self.build_folder, "tp_model.pt2")
        subprocess.run([sys.executable, os.path.join(self.source_folder, "export_model.py"), library, package],
                       check=True)
        self.run(f"{os.path.join(self.cpp.build.bindir, 'tp_main')} {package} {library}", env="conanrun")
