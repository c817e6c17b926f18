# Thin wrapper: the work is in scripts/. FLAVOUR=cpu (default) or cuda; BUILD_TYPE=Release (default) or Debug.
FLAVOUR ?= cpu
BUILD_TYPE ?= Release
export FLAVOUR BUILD_TYPE

.PHONY: demo test build bootstrap sanitize tsan fuzz bench package clean
demo:
	@scripts/demo.sh
test:
	@scripts/test.sh
build:
	@scripts/build.sh
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
package:
	@scripts/package.sh
clean:
	rm -rf build
