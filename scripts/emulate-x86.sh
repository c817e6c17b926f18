#!/usr/bin/env bash
# Runs an x86-64 program of this machine on an emulated x86-64 CPU of another class:
#   scripts/emulate-x86.sh HOST PROGRAM [ARGS...]
# HOST: haswell (x86-64-v3: AVX2 + FMA, no AVX-512) or nehalem (x86-64-v2: SSE4.2, no AVX).
# qemu-x86_64 (Debian's qemu-user 7.2, whose TCG runs AVX2 but not AVX-512) answers cpuid as that CPU, so what
# the program picks by CPU (pt2run's variant, the ops library's kernels, ATen's kernels, inductor's vector ISA)
# is what it would pick there, and an instruction that CPU lacks is SIGILL. Programs it starts run natively
# (qemu-user does not follow exec): gcc/g++/cc/c++ on PATH, CC and CXX become wrappers that run the compiler
# driver emulated too, so -march=native means the emulated CPU. Timings under emulation mean nothing.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: scripts/emulate-x86.sh haswell|nehalem PROGRAM [ARGS...]" >&2
  exit 2
fi
case "$1" in
  # the features TCG lacks are left out (they are system features, not instructions a program uses)
  haswell) cpu=Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid ;;
  nehalem) cpu=Nehalem ;;
  *) echo "error: unknown host class '$1': expected haswell or nehalem" >&2; exit 2 ;;
esac
shift
[ "$(uname -m)" = x86_64 ] || { echo "error: emulating an x86-64 CPU needs an x86-64 machine" >&2; exit 1; }
command -v qemu-x86_64 >/dev/null || { echo "error: qemu-x86_64 not found (apt-get install qemu-user)" >&2; exit 1; }

# an emulated program may run this script again: its compiler wrappers are not the real compilers
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v '^/tmp/pt2rt-emulate\.' | paste -sd: -)
wrappers=$(mktemp -d /tmp/pt2rt-emulate.XXXXXX)
trap 'rm -rf "$wrappers"' EXIT
for compiler in gcc g++ cc c++; do
  real=$(command -v "$compiler" || true)
  [ -n "$real" ] || continue
  printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s %s "$@"\n' "$cpu" "$real" >"$wrappers/$compiler"
  chmod +x "$wrappers/$compiler"
done
set +e
PATH=$wrappers:$PATH CC=$wrappers/gcc CXX=$wrappers/g++ qemu-x86_64 -cpu "$cpu" "$@"
