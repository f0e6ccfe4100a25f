#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, -fsanitize=fuzzer,address,undefined) in
# $FUZZ_BUILD (default build-fuzz) and runs each for FUZZ_SECONDS (default 60; `make test` runs
# them for 8) from its checked-in seed corpus. New inputs go to a scratch copy, so the
# repository's corpus changes only when someone copies a finding in on purpose. A crash, a leak,
# undefined behaviour or a timeout fails the run and leaves the reproducer in $FUZZ_BUILD/findings.
# Reproduce one with: build-fuzz/tests/fuzz/fuzz_NAME FILE
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-$(nproc)}

if [ ! -f "$FUZZ_BUILD/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$FUZZ_BUILD" -DSTALLWATCH_FUZZ=ON -DSTALLWATCH_WERROR=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
fi
cmake --build "$FUZZ_BUILD" -j "$JOBS" --target fuzzers

scratch=$(mktemp -d /tmp/stallwatch-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$FUZZ_BUILD/findings"
failed=0
for seeds in tests/fuzz/corpus/*/; do
  name=$(basename "$seeds")
  bin="$FUZZ_BUILD/tests/fuzz/$name"
  [ -x "$bin" ] || { echo "fuzz: $name has a corpus but no harness" >&2; failed=1; continue; }
  mkdir -p "$scratch/$name"
  cp "$seeds"/* "$scratch/$name/"
  max_len=4096
  [ "$name" = fuzz_elf ] && max_len=65536
  log="$scratch/$name.log"
  if "$bin" "$scratch/$name" -max_total_time="$FUZZ_SECONDS" -max_len="$max_len" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/findings/$name-" \
      > "$log" 2>&1; then
    runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz: $name ok, $runs inputs in ${FUZZ_SECONDS}s"
  else
    failed=1
    echo "fuzz: $name FAILED; the reproducer is in $FUZZ_BUILD/findings/:" >&2
    tail -40 "$log" >&2
  fi
done
exit $failed
