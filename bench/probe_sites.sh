#!/usr/bin/env bash
# What one traced call costs on NVIDIA's real driver entry points (issue #48). Debian non-free's
# libcuda (build/nvidia, scripts/fetch-libcuda.sh) begins every cu* entry with a stub whose first
# instruction, a RIP-relative compare, the kernel single-steps at a uprobe; the je after it is
# emulated. bench/driver_loop calls cuLaunchKernel CALLS times (no GPU: it returns
# CUDA_ERROR_NOT_INITIALIZED at once) in ROUNDS interleaved rounds of three variants, order
# rotated each round: untraced; the daemon with --probe-sites=entry (every probe at +0, as
# before issue #48); the daemon at its defaults (the je at +10). The same on the stand-in driver
# (build/mock/libcuda.so.1, which copies the stub's shape). With kernel.bpf_stats_enabled, the
# daemon's own programs' run time per call (cuda_enter/cuda_exit and their multi-link copies).
# Prints medians and the ns each variant adds over untraced; writes OUT.
#
#   sudo bash bench/probe_sites.sh           # ~1 minute with the defaults
#   sudo ROUNDS=9 CALLS=50000 bash bench/probe_sites.sh
#
# Knobs (environment): ROUNDS (5), CALLS (20000), PORT (19664), BUILD (build), LIBCUDA
# (BUILD/nvidia/libcuda.so.1), OUT (bench/results/probe-sites-latest.json). Needs root, curl,
# bpftool and python3. A benchmark: it passes or fails nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
ROUNDS=${ROUNDS:-5}
CALLS=${CALLS:-20000}
PORT=${PORT:-19664}
LIBCUDA=${LIBCUDA:-$BUILD/nvidia/libcuda.so.1}
MOCK=$BUILD/mock/libcuda.so.1
OUT=${OUT:-$ROOT/bench/results/probe-sites-latest.json}
LOOP=$BUILD/bench/driver_loop
STALLWATCH=$BUILD/stallwatch

log() { printf '[probe-sites %s] %s\n' "$(date +%T)" "$*" >&2; }
[ "$(id -u)" -eq 0 ] || { log "run as root"; exit 1; }
[ -e "$LIBCUDA" ] || { log "$LIBCUDA absent: run 'make deps' (scripts/fetch-libcuda.sh)"; exit 1; }
for f in "$LOOP" "$STALLWATCH" "$MOCK"; do
  [ -x "$f" ] || [ -f "$f" ] || { log "$f absent: build first (make build)"; exit 1; }
done
real=$(readlink -f "$LIBCUDA")
tmp=$(mktemp -d)
daemon=
stop_daemon() {
  [ -n "$daemon" ] || return 0
  kill -TERM "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  daemon=
}
trap 'stop_daemon; rm -rf "$tmp"' EXIT
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
trap 'stop_daemon; sysctl -qw kernel.bpf_stats_enabled=$old_stats; rm -rf "$tmp"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1

start_daemon() {  # $1: --probe-sites value
  "$STALLWATCH" run --listen "127.0.0.1:$PORT" --db none --window 1s --probe-sites "$1" \
    --library-dirs "$(dirname "$real"),$(dirname "$MOCK")" >"$tmp/daemon-$1.log" 2>&1 &
  daemon=$!
  for _ in $(seq 300); do
    curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.1
  done
  log "daemon did not become ready: $(tail -n 3 "$tmp/daemon-$1.log")"
  exit 1
}

# The daemon's own programs: run time per run of cuda_enter* and cuda_exit* (bpf_stats).
program_ns() {
  bpftool prog show --json | python3 -c '
import json, sys
progs = json.load(sys.stdin)
for side in ("cuda_enter", "cuda_exit"):
    t = sum(p.get("run_time_ns", 0) for p in progs if p.get("name", "").startswith(side))
    n = sum(p.get("run_cnt", 0) for p in progs if p.get("name", "").startswith(side))
    print(f"{side}={t / n if n else 0:.0f}", end=" ")
'
}

variants=(off entry auto)
: >"$tmp/rows"
for round in $(seq "$ROUNDS"); do
  for i in 0 1 2; do
    v=${variants[$(((i + round) % 3))]}
    [ "$v" = off ] || start_daemon "$v"
    for lib in real mock; do
      path=$real
      [ "$lib" = mock ] && path=$MOCK
      ns=$("$LOOP" "$path" --calls "$CALLS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ns_per_call"])')
      progs=""
      [ "$v" = off ] || progs=$(program_ns)
      echo "$round $v $lib $ns $progs" >>"$tmp/rows"
    done
    stop_daemon
  done
  log "round $round of $ROUNDS"
done
grep -h "probe sites:" "$tmp"/daemon-auto.log | head -n 1 | sed 's/^.*probe sites: /calibration: /' >&2 || true

python3 - "$tmp/rows" "$OUT" "$CALLS" "$ROUNDS" "$real" <<'PY'
import json, random, statistics, sys, datetime, platform
rows_path, out, calls, rounds, real = sys.argv[1:]

def interval(xs, n=10000):
    """95 % bootstrap interval of the median."""
    rng = random.Random(48)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return [meds[int(0.025 * n)], meds[int(0.975 * n) - 1]]

rows = {}
programs = {}
for line in open(rows_path):
    f = line.split()
    rnd, v, lib, ns = f[0], f[1], f[2], float(f[3])
    rows.setdefault((lib, v), []).append(ns)
    for kv in f[4:]:
        k, x = kv.split("=")
        programs.setdefault((lib, v, k), []).append(float(x))
result = {"date": datetime.date.today().isoformat(), "kernel": platform.release(),
          "calls": int(calls), "rounds": int(rounds), "libcuda": real, "libraries": {}}
print(f"cuLaunchKernel, median ns a call over {rounds} rounds of {calls} calls")
print(f"{'library':8} {'untraced':>9} {'entry(+0)':>10} {'auto':>9} {'added +0':>9} {'added auto':>11}"
      f" {'enter+exit progs':>17}")
for lib in ("real", "mock"):
    med = {v: statistics.median(rows[(lib, v)]) for v in ("off", "entry", "auto")}
    prog = {v: {k: statistics.median(programs.get((lib, v, k), [0]))
                for k in ("cuda_enter", "cuda_exit")} for v in ("entry", "auto")}
    added = {v: [a - b for a, b in zip(rows[(lib, v)], rows[(lib, "off")])] for v in ("entry", "auto")}
    result["libraries"][lib] = {"median_ns": med,
                               "added_interval_ns": {v: interval(added[v]) for v in added},
                               "added_ns": {v: med[v] - med["off"] for v in ("entry", "auto")},
                               "program_ns": prog,
                               "all_ns": {v: rows[(lib, v)] for v in ("off", "entry", "auto")}}
    p = prog["auto"]
    print(f"{lib:8} {med['off']:9.0f} {med['entry']:10.0f} {med['auto']:9.0f}"
          f" {med['entry'] - med['off']:9.0f} {med['auto'] - med['off']:11.0f}"
          f" {p['cuda_enter']:8.0f}+{p['cuda_exit']:.0f}")
    for v in ("entry", "auto"):
        lo, hi = result["libraries"][lib]["added_interval_ns"][v]
        print(f"  {lib} {v}: added per call, 95 % interval of the median over rounds {lo:.0f}..{hi:.0f} ns")
json.dump(result, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
