# Shared settings of the scripts; sourced, not run. FLAVOUR=cpu (default) or cuda.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLAVOUR=${FLAVOUR:-cpu}
BUILD_TYPE=${BUILD_TYPE:-Release}
case "$FLAVOUR" in
  cpu) VENV=$ROOT/.venv ;;
  cuda) VENV=$ROOT/.venv-cuda ;;
  *) echo "error: FLAVOUR must be cpu or cuda, got '$FLAVOUR'" >&2; exit 2 ;;
esac
case "$BUILD_TYPE" in
  Release|Debug|RelWithDebInfo) ;;
  *) echo "error: BUILD_TYPE must be Release, Debug or RelWithDebInfo, got '$BUILD_TYPE'" >&2; exit 2 ;;
esac
build_type_lc=$(echo "$BUILD_TYPE" | tr '[:upper:]' '[:lower:]')
BUILD_DIR=$ROOT/build/$FLAVOUR-$build_type_lc
PRESET=conan-$FLAVOUR-$build_type_lc
PYTHON=$VENV/bin/python
# The venv's tools (cmake, conan) first.
export PATH=$VENV/bin:$PATH
# Conan's cache lives in the checkout, so setting up never touches the user's own Conan configuration.
export CONAN_HOME=$ROOT/.conan2
CONAN_REMOTE=pt2rt-local
if [ "$FLAVOUR" = cuda ]; then
  CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
  # torch's CMake takes the first nvcc on PATH as the toolkit root, and /usr/local/bin/nvcc may be a wrapper.
  export PATH=$CUDA_ROOT/bin:$PATH
  export CUDA_PATH=$CUDA_ROOT
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-8.0;9.0}
fi

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }
