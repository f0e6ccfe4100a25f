#!/usr/bin/env bash
# Call sites against real PyTorch (issue #17, docs/validation.md). Usage (as root):
#   bench/gpu/validate_stacks.sh STALLWATCH_BINARY OUTDIR
# Runs bench/gpu/stack_loop.py under the daemon (1 s windows, bpf_stats on), first alone, then
# with CPU hogs on its cores; saves explain, `stallwatch stacks`, the daemon's log and the
# programs' run time, and prints the lines stack_loop.py's SITE- marks name.
set -uo pipefail
SW=${1:?stallwatch binary}; OUT=${2:?output directory}
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=${PORT:-19466}; CPUS=${CPUS:-0-1}
DB=/tmp/stallwatch-stacks/stallwatch.db; rm -rf "${DB%/*}"; mkdir -p "${DB%/*}" "$OUT"
S=$OUT/stacks-summary.txt
say() { printf '%s\n' "$*" | tee -a "$S"; }
say "== machine"; { uname -r; nvidia-smi -L; python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)'; } 2>&1 | tee -a "$S"
say "== SITE marks"; grep -n "# SITE-" "$HERE/stack_loop.py" | tee -a "$S"
sysctl -qw kernel.bpf_stats_enabled=1
"$SW" run --listen 127.0.0.1:$PORT --db "$DB" --window 1s --kube-api none >"$OUT/stacks-daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 150); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz',timeout=1)" 2>/dev/null && break
  kill -0 $DPID 2>/dev/null || break; sleep 0.2; done
kill -0 $DPID 2>/dev/null || { say "daemon died"; tail -20 "$OUT/stacks-daemon.log" | tee -a "$S"; exit 1; }
python3 "$HERE/prog_stats.py" "$DPID" > /tmp/stacks_stats_before.json
say "== loop alone (15 s)"
taskset -c "$CPUS" python3 "$HERE/stack_loop.py" 15 2>&1 | tee -a "$S"
say "== loop with 3 hogs on cores $CPUS (20 s)"
cp "$(command -v yes)" /tmp/fluent-bit
for _ in 1 2 3; do taskset -c "$CPUS" /tmp/fluent-bit >/dev/null & done
taskset -c "$CPUS" python3 "$HERE/stack_loop.py" 20 2>&1 | tee -a "$S"
pkill -f /tmp/fluent-bit
sleep 3
say "== program run time (stacks on)"; python3 "$HERE/prog_stats.py" "$DPID" /tmp/stacks_stats_before.json | tee -a "$S"
sysctl -qw kernel.bpf_stats_enabled=0
kill -TERM $DPID; wait $DPID; say "daemon exit $?"
grep -E "Python|frames|warn|error" "$OUT/stacks-daemon.log" | head -20 | tee -a "$S"
say "== explain"; "$SW" explain --db "$DB" --since 30m 2>&1 | tee -a "$S"
say "== explain --stacks (first chain's sites with native frames)"; "$SW" explain --db "$DB" --since 30m --stacks 2>&1 | grep -A12 "Site:" | head -40 | tee -a "$S"
say "== stacks (top 15)"; "$SW" stacks --db "$DB" --since 30m > "$OUT/stacks.folded" 2>&1; head -15 "$OUT/stacks.folded" | cut -c1-400 | tee -a "$S"
say "== sites by line"
"$SW" query --db "$DB" "SELECT call, function, file, line, sum(count) n, sum(stalled_ns)/1000000 ms FROM outlier_sites GROUP BY call, function, file, line ORDER BY ms DESC LIMIT 12" 2>&1 | tee -a "$S"
cp "$DB" "$OUT/" 2>/dev/null
