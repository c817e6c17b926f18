#!/usr/bin/env bash
# Mutation check of the tests that guard the most important behaviour: each mutant breaks one thing in the
# source, the build is redone and the tests that should notice are run; a mutant the tests do not kill fails this
# script. The source is restored after each mutant (and on exit). Not in CI (a rebuild per mutant); run it after
# changing these places or their tests. Prints a table: mutant, tests run, killed or SURVIVED.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/build.sh" >/dev/null
cd "$ROOT"
export IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so

# One mutant per index: what it breaks, where, the exact text it replaces, the replacement, the tests to run.
NAME=(); FILE=(); OLD=(); NEW=(); TESTS=()
mutant() { NAME+=("$1"); FILE+=("$2"); OLD+=("$3"); NEW+=("$4"); TESTS+=("$5"); }
mutant "close_enough always true" runtime/src/runtime.cpp \
  '  return at::allclose(a, e, tol.rtol, tol.atol, /*equal_nan=*/true);' '  return true;' \
  "ctest --test-dir $BUILD_DIR -R '^Verify[.]' --no-tests=error"
mutant "dynamic range not checked" runtime/src/runtime.cpp \
  '      if (size < dd.min || (dd.max && size > *dd.max)) {' '      if (false) {' \
  "ctest --test-dir $BUILD_DIR -R 'batch_above_range|batch_zero' --no-tests=error"
mutant "set_weight ignores its argument" ops/identity_conv_class.cpp \
  '    weight_ = std::move(owned);' '    (void)owned;' \
  "$PYTHON -m pytest -q -p no:cacheprovider ops/tests/test_identity_conv_class.py"
mutant "tensor writer: one tensor as a tuple" runtime/src/tensor.cpp \
  '  if (tensors.size() == 1) {' '  if (false) {' \
  "ctest --test-dir $BUILD_DIR -R 'Pt2run[.](RunWrites|OutputFiles)' --no-tests=error"
mutant "registration not checked" runtime/src/ops_libraries.cpp \
  '  if (missing.empty()) return;' '  return;' \
  "ctest --test-dir $BUILD_DIR -R 'ops_lacks_the_ops|RuntimeErrors' --no-tests=error"
mutant "num_runners ignored (always 1)" runtime/src/runtime.cpp \
  'static_cast<size_t>(options.num_runners),' 'size_t{1},' \
  "ctest --test-dir $BUILD_DIR -R '^Runners[.]' --no-tests=error"
mutant "integers compared through double" runtime/src/runtime.cpp \
  '  if (!at::isFloatingType(expected.scalar_type())) return at::equal(actual.cpu(), expected.cpu());' '' \
  "ctest --test-dir $BUILD_DIR -R '^Verify[.]' --no-tests=error"
mutant "spec integers accept floats" runtime/src/package.cpp \
  '  if (!j.is_number_integer()) malformed' '  if (!j.is_number()) malformed' \
  "ctest --test-dir $BUILD_DIR -R '^fuzz_replay_spec' --no-tests=error"
mutant "schemas not compared" runtime/src/ops_libraries.cpp \
  '  if (!stale.empty()) {' '  if (false) {' \
  "ctest --test-dir $BUILD_DIR -R 'ops_stale' --no-tests=error"

BACKUP=$(mktemp)
restored=1
restore() { [ "$restored" = 1 ] || { cp "$BACKUP" "$file"; restored=1; }; }
trap 'restore; rm -f "$BACKUP"; cmake --build "$BUILD_DIR" >/dev/null' EXIT

# Each test command must pass on the unmutated source, or a "killed" below would mean nothing.
for i in "${!NAME[@]}"; do
  bash -c "${TESTS[$i]}" >/dev/null 2>&1 || { echo "error: fails without any mutant: ${TESTS[$i]}" >&2; exit 2; }
done

survived=0
printf '%-38s %s\n' "mutant" "result"
for i in "${!NAME[@]}"; do
  name=${NAME[$i]} file=${FILE[$i]} tests=${TESTS[$i]}
  cp "$file" "$BACKUP"
  restored=0
  if ! "$PYTHON" - "$file" "${OLD[$i]}" "${NEW[$i]}" <<'PY'
import sys
path, old, new = sys.argv[1:4]
src = open(path).read()
if src.count(old) != 1:
    sys.exit(f"mutant text found {src.count(old)} times in {path}: {old!r}")
open(path, "w").write(src.replace(old, new))
PY
  then
    echo "error: cannot apply mutant '$name'" >&2
    exit 2
  fi
  if ! cmake --build "$BUILD_DIR" >/dev/null 2>&1; then
    result="killed (does not build)"
  elif bash -c "$tests" >/dev/null 2>&1; then
    result="SURVIVED ($tests)"
    survived=$((survived + 1))
  else
    result="killed"
  fi
  printf '%-38s %s\n' "$name" "$result"
  restore
done
[ "$survived" -eq 0 ] && echo "every mutant killed" || { echo "$survived mutant(s) survived"; exit 1; }
