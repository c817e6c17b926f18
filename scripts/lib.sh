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
# Conan's cache: one per machine, outside every checkout and apart from the user's own ~/.conan2. Clones share what
# Conan packaged, and torch's headers keep one path in every clone, so the compiler cache hits across clones (a
# cache inside the checkout names its package folders at random per clone). PT2RT_CONAN_HOME overrides it.
export CONAN_HOME=${PT2RT_CONAN_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/pt2rt/conan2}
CONAN_REMOTE=pt2rt-local
if [ "$FLAVOUR" = cuda ]; then
  CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
  # torch's CMake takes the first nvcc on PATH as the toolkit root, and /usr/local/bin/nvcc may be a wrapper.
  export PATH=$CUDA_ROOT/bin:$PATH
  export CUDA_PATH=$CUDA_ROOT
  export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-8.0;9.0}
fi

# Compiler cache: ccache (bootstrap installs it) in front of every compiler that CMake runs (our builds, the
# sanitizer, fuzz, cross and CUDA trees, Conan's package build, the scaffold and test_package consumers), one
# cache for every clone on this machine: paths below the checkout are hashed relative to it (CCACHE_BASEDIR), so a
# fresh clone in another folder hits what this one compiled. PT2RT_CCACHE=0 turns it off.
# Called again by the scripts that configure, after bootstrap may have installed it.
use_ccache() {
  if [ "${PT2RT_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null; then
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=true CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-12G}
  fi
}
use_ccache

# Each step with the time of day, so a log shows where a run's minutes went.
log() { printf '\033[1m==> %s %s\033[0m\n' "$(date +%T)" "$*"; }

# Installs those of the Debian packages "$@" that are missing (apt-get, as root; as another user it prints the
# command and fails). A package of another architecture (name:arm64) adds that architecture to dpkg first.
ensure_debian_packages() {
  local missing=() foreign=() p arch
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  for p in "${missing[@]}"; do
    arch=${p#*:}
    if [ "$arch" != "$p" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then foreign+=("$arch"); fi
  done
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: missing Debian packages: ${missing[*]}" >&2
    local add=""
    for arch in "${foreign[@]}"; do add+="sudo dpkg --add-architecture $arch && "; done
    echo "install them with: ${add}sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  for arch in "${foreign[@]}"; do
    log "dpkg --add-architecture $arch"
    dpkg --add-architecture "$arch"
  done
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
