# The two entry points of the README: `sudo make run` and `make test`. Both install what they
# need from Debian packages first (idempotent), configure and build into build/.
BUILD ?= build
JOBS ?= $(shell nproc)
LISTEN ?= 0.0.0.0:9464
DB ?= /var/lib/stallwatch/stallwatch.db

.PHONY: all deps build run test test-unit test-privileged test-e2e accuracy bench clean

all: build

deps:
	bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	mkdir -p $(dir $(DB))
	$(BUILD)/stallwatch run --listen $(LISTEN) --db $(DB)

# Every tier: unit (no root), privileged (real eBPF; skipped with exit 77 without root), e2e
# (real receivers on 127.0.0.1).
test: build
	cd $(BUILD) && ctest --output-on-failure

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

test-privileged: build
	cd $(BUILD) && ctest --output-on-failure -L privileged

test-e2e: build
	cd $(BUILD) && ctest --output-on-failure -L e2e

# The fault matrix N times (ACCURACY_RUNS, default 5): rates per scenario in docs/accuracy.md.
accuracy: build
	BUILD=$(BUILD) bash scripts/accuracy.sh

bench: build
	bash bench/run.sh

clean:
	rm -rf $(BUILD)
