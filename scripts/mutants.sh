#!/usr/bin/env bash
# Mutation check of the tests that guard the most important behaviour: the mutants and how they run are in
# scripts/mutants.py. Not in CI (a rebuild per mutant); run it (make mutants) after changing those places or their
# tests, and add a mutant when you add behaviour of that weight.
#   scripts/mutants.sh            every mutant (builds first)
#   scripts/mutants.sh NAME...    the mutants whose names contain one of NAME
#   scripts/mutants.sh --check    no build: every mutant's text occurs once in its file and every selector selects
#                                 a test (make test runs this through ctest's mutant_texts)
# BUILD_DIR (default: the flavour's build) is the build whose tests run.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
if [ "${1:-}" != --check ]; then
  "$ROOT/scripts/build.sh" >/dev/null
fi
exec "$PYTHON" "$ROOT/scripts/mutants.py" --build-dir "${MUTANTS_BUILD_DIR:-$BUILD_DIR}" "$@"
