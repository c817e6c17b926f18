#!/usr/bin/env bash
# Mutation check of the tests that guard the most important behaviour: each mutant breaks one thing in the
# source, the build is redone and the tests that should notice are run; a mutant the tests do not kill fails this
# script. The source is restored after each mutant (and on exit). Not in CI (a rebuild per mutant, ~20 minutes on
# 2 cores); run it after changing these places or their tests. Prints a table: mutant, tests run, killed or SURVIVED.
#   scripts/mutants.sh            every mutant
#   scripts/mutants.sh NAME...    the mutants whose names contain one of NAME
#   scripts/mutants.sh --check    only that each mutant's text occurs exactly once in its file (no build; make test
#                                 runs this, so a mutant cannot rot silently when its source changes)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

# One mutant per index: what it breaks, where, the exact text it replaces, the replacement, the tests to run.
NAME=(); FILE=(); OLD=(); NEW=(); TESTS=()
mutant() { NAME+=("$1"); FILE+=("$2"); OLD+=("$3"); NEW+=("$4"); TESTS+=("$5"); }
mutant "close_enough always true" runtime/src/runtime.cpp \
  '  return at::allclose(a, e, tol.rtol, atol, /*equal_nan=*/true);' '  return true;' \
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
  '  if (!missing.empty()) {' '  if (false) {' \
  "ctest --test-dir $BUILD_DIR -R 'ops_lacks_the_ops|RuntimeErrors' --no-tests=error"
mutant "num_runners ignored (always 1)" runtime/src/runtime.cpp \
  'static_cast<size_t>(options.num_runners),' 'size_t{1},' \
  "ctest --test-dir $BUILD_DIR -R '^Runners[.]' --no-tests=error"
mutant "integers compared through double" runtime/src/runtime.cpp \
  '  if (!at::isFloatingType(expected.scalar_type())) return at::equal(actual.cpu(), expected.cpu());' '' \
  "ctest --test-dir $BUILD_DIR -R '^Verify[.]' --no-tests=error"
mutant "spec integers accept floats" runtime/src/parse_spec.cpp \
  '  if (!j.is_number_integer()) malformed' '  if (!j.is_number()) malformed' \
  "ctest --test-dir $BUILD_DIR -R '^fuzz_replay_spec' --no-tests=error"
mutant "schemas not compared" runtime/src/ops_libraries.cpp \
  '  if (!stale.empty()) {' '  if (false) {' \
  "ctest --test-dir $BUILD_DIR -R 'ops_stale' --no-tests=error"

mutant "outputs that alias handed out as they are" runtime/src/runtime.cpp \
  '    if (not_own) t = t.clone(at::MemoryFormat::Contiguous);' '' \
  "ctest --test-dir $BUILD_DIR -R 'OutputsAreOwned' --no-tests=error"
mutant "derived dim: any size accepted" runtime/src/runtime.cpp \
  '        if ((size - dd.offset) % dd.scale != 0) {' '        if (false) {' \
  "$PYTHON -m pytest -q -p no:cacheprovider tests/python/test_zoo.py -k derived_dims"
mutant "golden atol_rel ignored (fixed atol)" runtime/src/runtime.cpp \
  '  const double atol = tol.atol_rel && !fixed_atol ? *tol.atol_rel * scale : tol.atol;' \
  '  const double atol = tol.atol;' \
  "$PYTHON -m pytest -q -p no:cacheprovider tests/python/test_golden_rule.py"
mutant "library SHA-256 not compared" runtime/src/extract.cpp \
  '        if (digest != variant.sha256 || static_cast<int64_t>(bytes.size()) != variant.size) {' '        if (false) {' \
  "ctest --test-dir $BUILD_DIR -R 'junk_model_library|BadPackages' --no-tests=error"
mutant "variant: a missing CPU feature ignored" runtime/src/cpu_features.cpp \
  '    } else if (!host_set().count(f)) {' '    } else if (false) {' \
  "ctest --test-dir $BUILD_DIR -R '^Variants[.]' --no-tests=error"
mutant "variant: the first runnable, not the most specialised" runtime/src/cpu_features.cpp \
  '    if (!best || v.cpu_features.size() > spec.variants[*best].cpu_features.size()) best = i;' \
  '    if (!best) best = i;' \
  "ctest --test-dir $BUILD_DIR -R '^Variants[.]' --no-tests=error"
mutant "C API: input errors reported as runtime errors" runtime/src/c_api.cpp \
  '    case pt2rt::ErrorCode::Input: return PT2RT_ERROR_INPUT;' \
  '    case pt2rt::ErrorCode::Input: return PT2RT_ERROR_RUNTIME;' \
  "ctest --test-dir $BUILD_DIR -R '^CApi[.]' --no-tests=error"
mutant "pt2serve: request size not bounded" serve/protocol.cpp \
  '    if (d > 1 && span > limit / static_cast<size_t>(d)) {' '    if (false) {' \
  "ctest --test-dir $BUILD_DIR -R '^fuzz_replay_(infer|grpc)_request' --no-tests=error"
mutant "pt2serve: every batched caller gets the first rows" serve/model.cpp \
  '      start += p->rows;' '' \
  "$PYTHON -m pytest -q -p no:cacheprovider tests/python/test_serve.py -k 'batched_and_each_gets_its_rows or classifier_batched'"
mutant "pt2serve: JSON depth not checked" serve/protocol.cpp \
  '      if (++depth > max_depth) {' '      if (++depth > max_depth * 100000) {' \
  "ctest --test-dir $BUILD_DIR -R '^fuzz_replay_infer_request' --no-tests=error"
mutant "pt2serve: decoded body not bounded" serve/http_codec.cpp \
  '    if (produced > max_bytes - out.size()) {' '    if (false) {' \
  "$PYTHON -m pytest -q -p no:cacheprovider tests/python/test_serve.py -k compressed_or_chunked"
mutant "pt2serve: JSON data read into the first input" serve/http_infer.cpp \
  '      const size_t k = stack_[1]->size() - 1;' '      const size_t k = 0;' \
  "ctest --test-dir $BUILD_DIR -R '^fuzz_replay_infer_request' --no-tests=error"
mutant "pt2serve: header lines not bounded" serve/http_service.cpp \
  '    evhttp_set_max_headers_size(http, kMaxHeaderBytes);' '' \
  "$PYTHON -m pytest -q -p no:cacheprovider tests/python/test_serve.py -k header_line"
mutant "pt2serve: a stop does not wait for answers being written" serve/http_service.cpp \
  '    if (stopping && in_flight == 0 && unsent.empty()) event_base_loopexit(base, nullptr);' \
  '    if (stopping && in_flight == 0) event_base_loopexit(base, nullptr);' \
  "$PYTHON -m pytest -q -p no:cacheprovider tests/python/test_serve.py -k sigterm"
mutant "set_num_threads not applied on the calling thread" runtime/src/runtime.cpp \
  '  detail::apply_num_threads();' '' \
  "ctest --test-dir $BUILD_DIR -R 'NumThreadsHolds' --no-tests=error"
mutant "run_into: a dynamic dim not checked after the run" runtime/src/runtime.cpp \
  '    if (outs[i].sizes() != at::IntArrayRef(outputs[i].shape)) {' '    if (false) {' \
  "ctest --test-dir $BUILD_DIR -R 'RunInto' --no-tests=error"
mutant "run_into: a buffer overlapping an input accepted" runtime/src/runtime.cpp \
  '      if (in.device == o.device && overlap(' '      if (false && overlap(' \
  "ctest --test-dir $BUILD_DIR -R 'RunInto|CApi[.]Options' --no-tests=error"
mutant "load_from_memory: golden cases not kept" runtime/src/runtime.cpp \
  '  if (options.keep_package_open) impl->golden = impl->package->read(impl->spec.golden_record);' '' \
  "ctest --test-dir $BUILD_DIR -R 'FromMemory' --no-tests=error"
mutant "C API: a program built for version 1 refused" runtime/src/c_api.cpp \
  '  if (header_version >= 1 && header_version <= PT2RT_C_API_VERSION) return PT2RT_OK;' \
  '  if (header_version == PT2RT_C_API_VERSION) return PT2RT_OK;' \
  "ctest --test-dir $BUILD_DIR -R 'c_api_consumers' --no-tests=error"

# Each mutant's text must occur exactly once in its file: a mutant whose text is gone (or ambiguous) proves nothing.
check_texts() {
  python3 - "$@" <<'PY'
import sys
args = sys.argv[1:]
n = len(args) // 3
bad = 0
for name, path, old in zip(args[:n], args[n:2 * n], args[2 * n:]):
    count = open(path).read().count(old)
    if count != 1:
        print(f"mutant '{name}': its text occurs {count} times in {path} (expected once): {old!r}", file=sys.stderr)
        bad += 1
print(f"{n} mutants, {n - bad} with their text exactly once in their file")
sys.exit(1 if bad else 0)
PY
}
if [ "${1:-}" = --check ]; then
  check_texts "${NAME[@]}" "${FILE[@]}" "${OLD[@]}"
  exit $?
fi
check_texts "${NAME[@]}" "${FILE[@]}" "${OLD[@]}" >/dev/null || exit 2
# Only the mutants named on the command line, if any.
if [ $# -gt 0 ]; then
  keep=()
  for i in "${!NAME[@]}"; do
    for want in "$@"; do [[ "${NAME[$i]}" == *"$want"* ]] && { keep+=("$i"); break; }; done
  done
  [ ${#keep[@]} -gt 0 ] || { echo "error: no mutant's name contains any of: $*" >&2; exit 2; }
else
  keep=("${!NAME[@]}")
fi

"$ROOT/scripts/build.sh" >/dev/null
export IDENTITY_CONV_OPS_LIBRARY=$BUILD_DIR/lib/libidentity_conv_ops.so

BACKUP=$(mktemp)
restored=1
restore() { [ "$restored" = 1 ] || { cp "$BACKUP" "$file"; restored=1; }; }
trap 'restore; rm -f "$BACKUP"; cmake --build "$BUILD_DIR" >/dev/null' EXIT

# Each test command must pass on the unmutated source, or a "killed" below would mean nothing.
for i in "${keep[@]}"; do
  bash -c "${TESTS[$i]}" >/dev/null 2>&1 || { echo "error: fails without any mutant: ${TESTS[$i]}" >&2; exit 2; }
done

survived=0
printf '%-56s %s\n' "mutant" "result"
for i in "${keep[@]}"; do
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
  printf '%-56s %s\n' "$name" "$result"
  restore
done
[ "$survived" -eq 0 ] && echo "every mutant killed" || { echo "$survived mutant(s) survived"; exit 1; }
