#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, -fsanitize=fuzzer,address,undefined) in
# $FUZZ_BUILD (default build-fuzz) and runs each for FUZZ_SECONDS (default 60; `make test` runs
# them for 8), JOBS (default: the CPUs) at a time, from its checked-in seed corpus. New inputs
# go to a scratch copy, so the repository's corpus changes only when someone copies a finding
# in on purpose. A crash, a leak, undefined behaviour or a timeout fails the run and leaves the
# reproducer in $FUZZ_BUILD/findings.
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
# One harness: its verdict goes to $scratch/NAME.rc and its line to $scratch/NAME.out, printed in
# corpus order once every harness ran ($JOBS of them at a time).
run_one() {
  local name=$1 seeds=$2
  local bin="$FUZZ_BUILD/tests/fuzz/$name" log="$scratch/$name.log" out="$scratch/$name.out"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $name has a corpus but no harness" >"$out"
    echo 1 >"$scratch/$name.rc"
    return
  fi
  mkdir -p "$scratch/$name"
  cp "$seeds"/* "$scratch/$name/"
  local max_len=4096
  [ "$name" = fuzz_elf ] && max_len=65536
  if "$bin" "$scratch/$name" -max_total_time="$FUZZ_SECONDS" -max_len="$max_len" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/findings/$name-" \
      > "$log" 2>&1; then
    local runs
    runs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz: $name ok, $runs inputs in ${FUZZ_SECONDS}s" >"$out"
    echo 0 >"$scratch/$name.rc"
  else
    { echo "fuzz: $name FAILED; the reproducer is in $FUZZ_BUILD/findings/:"; tail -40 "$log"; } >"$out"
    echo 1 >"$scratch/$name.rc"
  fi
}
names=()
for seeds in tests/fuzz/corpus/*/; do
  name=$(basename "$seeds")
  names+=("$name")
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  run_one "$name" "$seeds" &
done
wait
for name in "${names[@]}"; do
  if [ "$(cat "$scratch/$name.rc" 2>/dev/null)" = 0 ]; then
    cat "$scratch/$name.out"
  else
    failed=1
    cat "$scratch/$name.out" >&2 2>/dev/null || echo "fuzz: $name gave no verdict" >&2
  fi
done
exit $failed
