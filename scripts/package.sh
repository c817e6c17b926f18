#!/usr/bin/env bash
# conan create: the pt2rt Conan package built from this tree in Conan's cache (scripts/lib.sh: CONAN_HOME), then
# test_package/ - a consumer that builds an ops library with pt2rt_add_ops_library, exports a model using it
# and runs it with pt2rt::Runtime.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
"$ROOT/scripts/bootstrap.sh"
log "conan create . (flavour $FLAVOUR)"
cd "$ROOT"
# The cache is shared by every clone on the machine: only the package being made stays (each keeps its build tree).
conan remove "pt2rt/*" -c >/dev/null 2>&1 || true
# Its build folders are named at random: paths relative to the cache let the compiler cache hit anyway.
[ -z "${CCACHE_BASEDIR:-}" ] || export CCACHE_BASEDIR=$CONAN_HOME
conan create . -r "$CONAN_REMOTE" --build=missing -o "&:flavour=$FLAVOUR" -s build_type="$BUILD_TYPE" \
  -s compiler.cppstd=20 -c tools.cmake.cmaketoolchain:generator=Ninja
