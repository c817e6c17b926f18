#!/usr/bin/env bash
# Runs an aarch64 program on this x86-64 machine: scripts/qemu-aarch64.sh PROGRAM [ARGS...]
# - qemu-aarch64 (Debian's qemu-user) with the cross toolchain's sysroot for the dynamic loader and libc;
# - LD_LIBRARY_PATH: PT2RT_QEMU_LIBRARY_PATH if set, else the cross build's libtorch (build/aarch64-release),
#   the build's lib/ and the arm64 multiarch libraries (libcrypto); bundle binaries find their own through RUNPATH;
# - /proc/cpuinfo: libc10's cpuinfo parses it at start and crashes on the host's x86 one, so the program runs in
#   a private mount namespace (unshare -m, as root or in a user namespace) with an aarch64 cpuinfo bound over it.
# Timings under qemu mean nothing.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 1 ]; then
  echo "usage: scripts/qemu-aarch64.sh PROGRAM [ARGS...]" >&2
  exit 2
fi
command -v qemu-aarch64 >/dev/null || { echo "error: qemu-aarch64 not found (apt-get install qemu-user)" >&2; exit 1; }
SYSROOT=${PT2RT_QEMU_SYSROOT:-/usr/aarch64-linux-gnu}
[ -e "$SYSROOT/lib/ld-linux-aarch64.so.1" ] \
  || { echo "error: no aarch64 sysroot at $SYSROOT (apt-get install g++-aarch64-linux-gnu)" >&2; exit 1; }

if [ -z "${PT2RT_QEMU_LIBRARY_PATH+x}" ]; then
  build=${PT2RT_CROSS_BUILD_DIR:-$ROOT/build/aarch64-release}
  paths=()
  torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
  if [ -n "$torch_dir" ]; then
    torch=$(cd "$torch_dir/../../.." && pwd)  # <package>/torch
    paths+=("$torch/lib" "$torch/../nvidia/cu13/lib")
  fi
  [ -d "$build/lib" ] && paths+=("$build/lib")
  paths+=(/usr/lib/aarch64-linux-gnu)
  PT2RT_QEMU_LIBRARY_PATH=$(IFS=:; echo "${paths[*]}")
fi

cpuinfo=$(mktemp /tmp/pt2rt-cpuinfo.XXXXXX)
for ((i = 0; i < $(nproc); i++)); do
  cat >>"$cpuinfo" <<INFO
processor	: $i
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x3
CPU part	: 0xd0c
CPU revision	: 1

INFO
done

# /sys/devices/system/cpu: the host's x86 tree has no MIDR_EL1 and x86 caches; oneDNN's xbyak_aarch64 reads both at
# libtorch's load ("Can't open MIDR_EL1 sysfs entry") and the process's heap was found corrupt at exit with it.
# The program sees an aarch64 tree instead (Neoverse N1 ids, 64K L1d/L1i, 1M L2 per core, 32M L3 shared).
sysfs=$(mktemp -d /tmp/pt2rt-sysfs.XXXXXX)
trap 'rm -f "$cpuinfo"; rm -rf "$sysfs"' EXIT
last=$(($(nproc) - 1))
for f in possible present online; do echo "0-$last" >"$sysfs/$f"; done
echo "" >"$sysfs/offline"
echo 255 >"$sysfs/kernel_max"
for ((i = 0; i <= last; i++)); do
  d=$sysfs/cpu$i
  mkdir -p "$d/regs/identification" "$d/topology"
  echo 0x00000000413fd0c1 >"$d/regs/identification/midr_el1"
  echo 0x0000000000000000 >"$d/regs/identification/revidr_el1"
  echo 1 >"$d/online"
  echo "$i" >"$d/topology/core_id"
  echo 0 >"$d/topology/physical_package_id"
  echo "$i" >"$d/topology/thread_siblings_list"
  echo "0-$last" >"$d/topology/core_siblings_list"
  index=0
  for cache in "1 Data 64K 4 256" "1 Instruction 64K 4 256" "2 Unified 1024K 8 2048" "3 Unified 32768K 16 32768"; do
    read -r level type size ways sets <<<"$cache"
    c=$d/cache/index$index
    mkdir -p "$c"
    echo "$level" >"$c/level"; echo "$type" >"$c/type"; echo "$size" >"$c/size"
    echo "$ways" >"$c/ways_of_associativity"; echo "$sets" >"$c/number_of_sets"; echo 64 >"$c/coherency_line_size"
    if [ "$level" = 3 ]; then echo "0-$last" >"$c/shared_cpu_list"; else echo "$i" >"$c/shared_cpu_list"; fi
    index=$((index + 1))
  done
done

# One OpenMP thread unless asked otherwise: under qemu-user 7.2 libtorch's parallel ops (even a plain conv2d package)
# hang with two or more; the aarch64 code is the same at any thread count, the threading is not tested here.
run=(env QEMU_LD_PREFIX="$SYSROOT" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" LD_LIBRARY_PATH="$PT2RT_QEMU_LIBRARY_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
     qemu-aarch64 "$@")
if [ "$(id -u)" -eq 0 ]; then
  ns=(unshare -m)
else
  ns=(unshare -m -r --map-current-user)
fi
# the bind mount exists only inside the namespace; the program keeps this shell's user, cwd and environment
set +e
"${ns[@]}" bash -c 'mount --bind "$1" /proc/cpuinfo && mount --bind "$2" /sys/devices/system/cpu && shift 2 && exec "$@"' \
  _ "$cpuinfo" "$sysfs" "${run[@]}"
exit $?
