#!/usr/bin/env bash
# The x86-64 host classes of make test that this machine is not, emulated (scripts/emulate-x86.sh: qemu-x86_64
# answers cpuid as that CPU and traps the instructions it lacks; timings there mean nothing):
# - haswell, AVX2 only (x86-64-v3): the C++ tests' packages exported there (so "native" is that CPU's code), then
#   test_ops, and every gtest of test_runtime in a process of its own (as ctest runs them; the thread stress tests
#   aside, see EMULATED_OUT), pt2run children emulated too; then tests/x86_hosts (pt2run's variant choice, the ops
#   kernels picked there, bit for bit).
# - nehalem, no AVX (x86-64-v2): test_ops, and tests/x86_hosts (pt2run picks the portable variant, refuses the
#   others). Python does not run there: numpy's wheel executes AVX at import (SIGILL).
# Runs on the build as it is: make test runs it after its own build and tests; make test-x86-hosts builds first.
# X86_HOSTS_SET=subset (make test) runs on haswell only the gtests whose outcome depends on the CPU (CPU features
# and variant choice, model runs and golden checks through C++ and C, unusual input layouts), in $(nproc) gtest
# shards: ~3 minutes instead of ~10 on 2 cores; X86_HOSTS_SET=all (make test-x86-hosts, the default) runs every
# gtest there, each in a process of its own.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$FLAVOUR" = cpu ] || { echo "error: the emulated x86 hosts run the cpu flavour" >&2; exit 2; }
[ "$(uname -m)" = x86_64 ] || { echo "error: emulating x86-64 hosts needs an x86-64 machine" >&2; exit 2; }
EMULATE=$ROOT/scripts/emulate-x86.sh
OPS=$BUILD_DIR/lib/libidentity_conv_ops.so
PACKAGES=$BUILD_DIR/test-packages-haswell
status=0

# Left out under emulation: the thread stress tests (3200 runs from 8 threads each; 5-15 minutes apiece under
# qemu on a 2-vCPU machine). Threading does not depend on the host class: they run natively and under TSan.
EMULATED_OUT='Runners/Threads.*'
case "${X86_HOSTS_SET:-all}" in
  all) GTEST_FILTER="-$EMULATED_OUT" ;;
  subset) GTEST_FILTER='HostCpu.*:Variants.*:Runtime.*:Verify.*:CApi.*:Matrix/UnusualInput.*' ;;
  *) echo "error: X86_HOSTS_SET must be all or subset, got '$X86_HOSTS_SET'" >&2; exit 2 ;;
esac

# Runs each gtest of binary $2 that GTEST_FILTER selects under host class $1 in its own process, $(nproc) at a
# time. Prints the log of each that fails.
each_gtest() {
  local host=$1 binary=$2 logs
  logs=$(mktemp -d /tmp/pt2rt-x86-hosts.XXXXXX)
  "$binary" --gtest_list_tests --gtest_filter="$GTEST_FILTER" | awk '/^[^ ]/ {suite = $1} /^  / {print suite $1}' \
    >"$logs/list"
  if [ ! -s "$logs/list" ]; then  # as ctest --no-tests=error: a run of no test is a failure
    echo "error: $(basename "$binary") lists no test to run on $host" >&2
    rm -rf "$logs"
    return 1
  fi
  log "$(basename "$binary") on $host: $(wc -l <"$logs/list") tests, each under scripts/emulate-x86.sh $host"
  export -f show_failure
  EMULATED_TIMEOUT=$EMULATED_TIMEOUT EMULATE=$EMULATE HOST=$host BINARY=$binary LOGS=$logs xargs -P "$(nproc)" -I{} \
    bash -c 'log=$LOGS/$(echo "$1" | tr / _).log; rc=0
       timeout -k 10 "$EMULATED_TIMEOUT" "$EMULATE" "$HOST" "$BINARY" --gtest_filter="$1" >"$log" 2>&1 || rc=$?
       [ "$rc" -eq 0 ] || { echo "FAILED on $HOST: $1 (exit $rc)"; show_failure "$log" "$rc"; echo "$1" >>"$LOGS/failed"; }
     ' _ {} <"$logs/list"
  local failed=0
  [ -f "$logs/failed" ] && failed=$(wc -l <"$logs/failed")
  echo "$(basename "$binary") on $host: $failed failed"
  rm -rf "$logs"
  [ "$failed" -eq 0 ]
}

# The emulated CPU as its compiler's -march=native sees it (the driver runs cpuid: emulated, it sees haswell) keys
# the machine's package cache, looked up natively: Python importing torch under qemu alone takes a minute.
identity=haswell:$("$EMULATE" haswell "$(command -v g++)" -march=native -E -dM -x c++ /dev/null | sort | sha256sum | cut -c1-16)
export_args=(--out "$PACKAGES" --probe-ops "$BUILD_DIR/lib/libpt2rt_probe_ops.so" --cpu-identity "$identity")
if ! IDENTITY_CONV_OPS_LIBRARY=$OPS PYTHONPATH=$ROOT "$PYTHON" "$ROOT/tests/cpp/export_packages.py" "${export_args[@]}" \
     --cache-only; then
  log "test packages exported on haswell (export_packages.py under emulation) -> $PACKAGES"
  IDENTITY_CONV_OPS_LIBRARY=$OPS PYTHONPATH=$ROOT "$EMULATE" haswell "$PYTHON" "$ROOT/tests/cpp/export_packages.py" \
    "${export_args[@]}" || status=1
fi

# Each emulated test process gets this long (seconds; the slowest shard takes ~3 minutes): one that hangs fails,
# naming the test it was in, instead of holding make test until CI's limit.
EMULATED_TIMEOUT=${EMULATED_TIMEOUT:-1200}

# The log of a failed emulated gtest process whose exit status was $2: its failures, and on a timeout the test it
# was running.
show_failure() {
  local log=$1 rc=$2
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "  timed out after ${EMULATED_TIMEOUT}s in: $(grep -o '^\[ RUN      \] .*' "$log" | tail -1 | cut -c14-)"
  fi
  grep -v -e '^\[ RUN      \]' -e '^\[       OK \]' "$log" | tail -200
}

# Runs the gtests of binary $2 that filter $3 selects under host class $1 in $(nproc) processes at once, each a gtest
# shard (for tests that share no state). Prints the log of a shard that fails.
sharded() {
  local host=$1 binary=$2 filter=$3 logs n failed=0 rc
  logs=$(mktemp -d /tmp/pt2rt-x86-hosts.XXXXXX)
  n=$(nproc)
  log "$(basename "$binary") on $host, $n shards"
  local pids=()
  for ((i = 0; i < n; i++)); do
    GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout -k 10 "$EMULATED_TIMEOUT" "$EMULATE" "$host" "$binary" \
      --gtest_filter="$filter" >"$logs/$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < n; i++)); do
    rc=0
    wait "${pids[$i]}" || rc=$?
    if [ "$rc" -ne 0 ]; then
      echo "FAILED on $host: $(basename "$binary"), shard $i of $n (exit $rc)"
      show_failure "$logs/$i.log" "$rc"
      failed=1
    fi
  done
  grep -h "^\[  PASSED  \]" "$logs"/*.log | sed "s/^/$host, /"
  rm -rf "$logs"
  return $failed
}

export IDENTITY_CONV_OPS_LIBRARY=$OPS
for host in haswell nehalem; do
  sharded "$host" "$BUILD_DIR/bin/test_ops" '*' || status=1
done
export PT2RT_TEST_PACKAGES=$PACKAGES PT2RT_TEST_LAUNCHER="$EMULATE haswell"
if [ "${X86_HOSTS_SET:-all}" = subset ]; then  # these share no state: two processes, not one per test
  sharded haswell "$BUILD_DIR/bin/test_runtime" "$GTEST_FILTER" || status=1
else
  each_gtest haswell "$BUILD_DIR/bin/test_runtime" || status=1
fi
unset PT2RT_TEST_PACKAGES PT2RT_TEST_LAUNCHER

log "pytest tests/x86_hosts"
(cd "$ROOT" && PT2RT_TEST_PACKAGES=$PACKAGES PT2RUN="$BUILD_DIR/bin/pt2run" \
  "$PYTHON" -m pytest -q -p no:cacheprovider tests/x86_hosts) || status=1
exit $status
