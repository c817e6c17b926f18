# Cross-building for linux-aarch64 without Conan, with Debian's cross toolchain (g++-aarch64-linux-gnu):
#   cmake -S . -B build/aarch64-cmake -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/linux-aarch64.cmake \
#     -DCMAKE_PREFIX_PATH=<aarch64 libtorch: include/, lib/, share/cmake/Torch> -DPT2RT_DEPS_DIR=<deps> \
#     -DPT2RT_BUILD_TESTS=OFF
# The libtorch is the one scripts/cross-build.sh takes from PyPI's aarch64 wheel (CPU only); the deps folder is
# what TRIPLET=aarch64-linux-gnu scripts/gpu-deps.sh fills (nlohmann_json, CLI11, OpenSSL of arm64). docs/edge.md.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
