#!/usr/bin/env bash
# Validates stallwatch against a real PyTorch training loop on a GPU machine (docs/validation.md).
# Usage (as root): bench/gpu/validate.sh STALLWATCH_BINARY OUTDIR
#   Runs the loop alone, under the daemon, under the daemon with bpf_stats on, and under the
#   daemon with a CPU hog (named fluent-bit, started through taskset) on the loop's cores; then
#   saves /metrics, explain (text, --per-process, --json), the outliers and the programs' run
#   time. Needs python3 with torch and a GPU; LD_LIBRARY_PATH may point at carried libraries.
set -uo pipefail
SW=${1:?stallwatch binary}; OUT=${2:?output directory}
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=${PORT:-19464}; PHASE=${PHASE:-30}; CALM_CPUS=${CALM_CPUS:-0-7}; CPUS=${CPUS:-0-1}
DB=/tmp/stallwatch-validate/stallwatch.db; rm -rf "${DB%/*}"; mkdir -p "${DB%/*}"
S=$OUT/summary.txt
say() { printf '%s\n' "$*" | tee -a "$S"; }
scrape() { python3 - "$PORT" "$1" <<'PY'
import sys, urllib.request
try:
    sys.stdout.write(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=5).read().decode())
except Exception as e:
    print(f"scrape failed: {e}")
PY
}
loop() { taskset -c "${LOOP_CPUS:-$CALM_CPUS}" python3 "$HERE/train_loop.py" --seconds "$PHASE" --label "$1" 2>&1 | tee -a "$S"; }

say "== machine"; { uname -r; nvidia-smi -L; ls -l /sys/kernel/btf/vmlinux; nproc; } 2>&1 | tee -a "$S"
say "== A: loop alone"; loop alone

say "== daemon start"
"$SW" run --listen 127.0.0.1:$PORT --db "$DB" --window 2s --kube-api none \
  >"$OUT/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [[ $(scrape /healthz) == *ok* ]] && break; kill -0 $DPID 2>/dev/null || break; sleep 0.2; done
scrape /healthz | tee -a "$S"; kill -0 $DPID 2>/dev/null || { say "daemon died"; tail -20 "$OUT/daemon.log" | tee -a "$S"; exit 1; }

say "== B: loop under the daemon"; loop daemon
say "== C: loop under the daemon, bpf_stats on"
sysctl -qw kernel.bpf_stats_enabled=1
python3 "$HERE/prog_stats.py" "$DPID" > /tmp/stats_before.json
loop daemon_bpf_stats
python3 "$HERE/prog_stats.py" "$DPID" /tmp/stats_before.json | tee -a "$S"
sysctl -qw kernel.bpf_stats_enabled=0


say "== D: loop under the daemon, fluent-bit (via taskset) hogging cores $CPUS"
cp "$(command -v yes)" /tmp/fluent-bit
for _ in 1 2 3; do taskset -c "$CPUS" /tmp/fluent-bit >/dev/null & done
LOOP_CPUS=$CPUS loop daemon_hog
pkill -f /tmp/fluent-bit
sleep 5  # two windows so the chain's end is in the store
scrape /metrics > "$OUT/metrics.txt"
kill -TERM $DPID; wait $DPID; say "daemon exit $?"; cp "$DB" "$OUT/"
say "== A2: loop alone again"; loop alone_again

say "== explain"; "$SW" explain --db "$DB" --since 30m 2>&1 | tee -a "$S"
say "== explain --per-process"; "$SW" explain --db "$DB" --since 30m --per-process 2>&1 | tee -a "$S"
say "== outliers by call"
"$SW" query --db "$DB" "SELECT call, count(*) n, max(duration_ns) FROM outliers GROUP BY call ORDER BY n DESC LIMIT 20" 2>&1 | tee -a "$S"
say "== metrics (cuda families)"; grep -E '^stallwatch_(attached|cuda_call_duration_seconds_count|off_cpu|chain)' "$OUT/metrics.txt" | head -60 | tee -a "$S"
grep -E 'tracing|warn|error' "$OUT/daemon.log" | head -40 | tee -a "$S"
say "== preemptors named"
"$SW" query --db "$DB" "SELECT comm, count(*) windows, sum(runnable_ns)/1000000 AS runnable_ms FROM preemptor_windows GROUP BY comm ORDER BY 3 DESC LIMIT 10" 2>&1 | tee -a "$S"
say "== throughput per phase (last report of each)"
grep -h '"median_step_ms"' "$S" | python3 -c '
import json, sys, collections
rows = collections.defaultdict(list)
for l in sys.stdin:
    r = json.loads(l); rows[r["label"]].append(r)
for k, v in rows.items():
    rates = sorted(r["steps_per_s"] for r in v[1:]) or [v[0]["steps_per_s"]]
    meds = sorted(r["median_step_ms"] for r in v[1:]) or [v[0]["median_step_ms"]]
    print(f"{k:18s} steps/s median {rates[len(rates)//2]:8.2f}  step median {meds[len(meds)//2]:7.3f} ms  (reports: {len(v)})")
' | tee -a "$S"
