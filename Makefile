# The two entry points of the README: `sudo make run` and `make test`. Both install what they
# need from Debian packages first (scripts/install-deps.sh, idempotent) and build into build/:
# `run` only what the daemon needs (install-deps.sh run) and only its CMake target, `stallwatch`;
# `test` every dependency (install-deps.sh test) and every target (issue #51).
BUILD ?= build
JOBS ?= $(shell nproc)
LISTEN ?= 0.0.0.0:9464
DB ?= /var/lib/stallwatch/stallwatch.db

.PHONY: all deps deps-run deps-deb daemon build run test test-unit test-privileged test-e2e \
	test-kernels test-asan fuzz fuzz-smoke accuracy bench clean deb

all: build

deps:
	BUILD=$(BUILD) bash scripts/install-deps.sh test

deps-run:
	BUILD=$(BUILD) bash scripts/install-deps.sh run

deps-deb:
	BUILD=$(BUILD) bash scripts/install-deps.sh deb

# -Werror here (development and CI); a plain CMake build leaves warnings as warnings.
CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTALLWATCH_WERROR=ON
$(BUILD)/CMakeCache.txt:
	$(CONFIGURE)

# The daemon alone, from the `run` dependencies. A tree configured here, before the test tools
# were installed, is marked: `make build` configures it once more, so that CMake finds what came
# since (help2man for the man page, node, promtool).
daemon: deps-run
	@if [ ! -f $(BUILD)/CMakeCache.txt ]; then \
	  echo "make: configuring $(BUILD) for the daemon"; \
	  $(CONFIGURE) && touch $(BUILD)/.configured-for-daemon; \
	fi
	cmake --build $(BUILD) -j $(JOBS) --target stallwatch

build: deps $(BUILD)/CMakeCache.txt
	@if [ -f $(BUILD)/.configured-for-daemon ]; then \
	  echo "make: configuring $(BUILD) again: the test dependencies are installed now"; \
	  $(CONFIGURE) && rm -f $(BUILD)/.configured-for-daemon; \
	fi
	cmake --build $(BUILD) -j $(JOBS)

# build/stallwatch_<version>_<arch>.deb (CPack, Depends from dpkg-shlibdeps). Configures again
# first so that the package's version is the current commit's, as `stallwatch version` prints.
deb: deps-deb
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && cpack -G DEB
	@ls $(BUILD)/stallwatch_*.deb

run: daemon
	mkdir -p $(dir $(DB))
	$(BUILD)/stallwatch run --web.listen-address $(LISTEN) --db $(DB)

# Every tier: unit (no root), privileged (real eBPF; skipped with exit 77 without root), e2e
# (real receivers on 127.0.0.1); then each libFuzzer harness briefly (issue #15). Tests that
# create or measure contention are RUN_SERIAL (alone on the host); the rest run JOBS
# (default: the CPUs) at a time. The unit tier
# under AddressSanitizer and UBSan is `make test-asan` (a second full build: CI runs it after
# this; docs/development.md "Tests" has the timings).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) fuzz-smoke

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

test-privileged: build
	cd $(BUILD) && ctest --output-on-failure -L privileged

test-e2e: build
	cd $(BUILD) && ctest --output-on-failure -L e2e

# The kernel matrix (issue #38): Debian 12's 6.1 and bookworm-backports' 6.12 booted in qemu
# (TCG), the host's tree shared read-only, the daemon's check, exact counts, off-CPU and a
# chain, Python frames run as root in each (tests/kernels/run.sh; docs/development.md "Kernels").
test-kernels: build
	bash tests/kernels/run.sh || [ $$? -eq 77 ]

# The unit tier built with -fsanitize=address,undefined (gcc) in build-asan: any leak, overflow
# or undefined behaviour fails the test that ran into it. Debug info is -g1 (functions and line
# tables, what a sanitizer's report needs), kept in the test binaries. A CI machine's disk once
# filled while this tree (then full -g) linked beside a 5.3 GB build/; now 4.9 GB beside 1.5.
ASAN_BUILD ?= build-asan
SAN_FLAGS = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1
$(ASAN_BUILD)/CMakeCache.txt:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DSTALLWATCH_WERROR=OFF \
	  -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1 -DSTALLWATCH_TEST_DEBUG_INFO=ON \
	  -DCMAKE_CXX_FLAGS="$(SAN_FLAGS)" \
	  -DCMAKE_C_FLAGS="$(SAN_FLAGS)" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
	  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"

test-asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -L unit

# libFuzzer harnesses (tests/fuzz): FUZZ_SECONDS each (default 60) from the seed corpus.
fuzz: deps
	bash scripts/fuzz.sh

fuzz-smoke: deps
	FUZZ_SECONDS=8 bash scripts/fuzz.sh

# The fault matrix N times (ACCURACY_RUNS, default 5): rates per scenario in docs/accuracy.md.
accuracy: build
	BUILD=$(BUILD) bash scripts/accuracy.sh

bench: build
	bash bench/run.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz
