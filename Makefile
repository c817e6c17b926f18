# Thin wrapper: the work is in scripts/. FLAVOUR=cpu (default) or cuda; BUILD_TYPE=Release (default) or Debug;
# TARGET=linux-aarch64 for cross-build and bundle; TORCH=2.11 (2.11 .. 2.15) for test-torch.
FLAVOUR ?= cpu
BUILD_TYPE ?= Release
TARGET ?= linux-aarch64
export FLAVOUR BUILD_TYPE TARGET

.PHONY: demo lite test test-all test-aarch64 test-x86-hosts test-torch container build cross-build bundle bootstrap sanitize tsan fuzz bench bench-peers bench-lite package mutants clean
demo:
	@scripts/demo.sh
test:
	@scripts/test.sh
test-all:
	@.ci/run --all
test-x86-hosts:
	@scripts/build.sh && scripts/test-x86-hosts.sh
test-aarch64:
	@scripts/test-aarch64.sh
test-torch:
	@TORCH=$(TORCH) scripts/test-torch.sh
build:
	@scripts/build.sh
cross-build:
	@scripts/cross-build.sh
# make lite: this machine's; make lite TARGET=linux-aarch64: aarch64's (TARGET's default above is cross-build's)
lite:
	@LITE_TARGET=$(if $(filter file,$(origin TARGET)),,$(TARGET)) scripts/lite.sh
bundle:
	@scripts/bundle.sh
bootstrap:
	@scripts/bootstrap.sh
sanitize:
	@scripts/sanitize.sh
tsan:
	@scripts/tsan.sh
fuzz:
	@scripts/fuzz.sh
bench:
	@scripts/bench.sh
bench-peers:
	@scripts/bench.sh peers
bench-lite:
	@scripts/bench.sh lite
container:
	@scripts/container.sh
mutants:
	@scripts/mutants.sh
package:
	@scripts/package.sh
clean:
	rm -rf build dist dist-linux-aarch64 dist-lite
