#!/usr/bin/env bash
# Per-call cost of stallwatch's programs on a machine without the build tools (a GPU host): the
# measurement of bench/run.sh parts 1 and 3 for issue #19 item 1, from prebuilt binaries, with
# python3 instead of jq/bpftool/curl: per-call time untraced, under the daemon and under an empty
# uprobe pair; then bpf_stats of the timer pair alone (empty_probe --timer: two clock reads and two
# task-storage lookups, the floor of any per-thread call timer), of cuda_enter/cuda_exit and of the
# scheduler hooks. Then, when python3 has torch and a GPU, the same programs' time on the real
# calls of bench/gpu/train_loop.py, beside an empty pair and the timer pair on the real libcudart.
# Usage (as root): bench/gpu/call_cost.sh BINDIR MOCK_LIBCUDART OUTDIR
#   BINDIR holds stallwatch, empty_probe, call_loop and pingpong (LD_LIBRARY_PATH may point at
#   carried libraries). Prints and saves OUTDIR/call_cost.txt.
set -uo pipefail
BIN=${1:?directory of stallwatch, empty_probe, call_loop, pingpong}
MOCK=${2:?the mock libcudart.so.12}
OUT=${3:?output directory}
HERE=$(cd "$(dirname "$0")" && pwd)
CALLS=${CALLS:-400000}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-19474}
TORCH_SECONDS=${TORCH_SECONDS:-20}
S=$OUT/call_cost.txt
W=$(mktemp -d /tmp/call_cost.XXXXXX)
mkdir -p "$OUT" "$W/lib"
LIB=$W/lib/libcudart.so.12 # a private inode: nobody else's probes fire in our loop
cp "$MOCK" "$LIB"
export MOCK_CUDA_SYNC_CPU_US=0
PIDS=()
LPIDS=() # the loaders whose programs stat_phase reads
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sysctl -qw kernel.bpf_stats_enabled=0
}
trap cleanup EXIT
say() { printf '%s\n' "$*" | tee -a "$S"; }
scrape() {
  python3 - "$PORT" "$1" <<'PY'
import sys, urllib.request
try:
    sys.stdout.write(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=5).read().decode())
except Exception as e:
    print(f"scrape failed: {e}")
PY
}
metric_sum() { scrape /metrics | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%.0f\n", s }'; }
per_call() { "$BIN/call_loop" "$LIB" --calls "$CALLS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ns_per_call"])'; }
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

DPID=
start_daemon() { # extra flags...
  "$BIN/stallwatch" run --listen 127.0.0.1:$PORT --kube-api none --detach-linger 600s "$@" >>"$W/daemon.log" 2>&1 &
  DPID=$!
  PIDS+=("$DPID")
  local i
  for i in $(seq 300); do
    [[ $(scrape /healthz) == *ok* ]] && return 0
    kill -0 "$DPID" 2>/dev/null || break
    sleep 0.1
  done
  say "daemon did not start:"
  tail -20 "$W/daemon.log" | tee -a "$S"
  exit 1
}
stop_daemon() {
  kill -TERM "$DPID"
  wait "$DPID"
  DPID=
}
start_loader() { # LIBRARY [--sched]
  "$BIN/empty_probe" "$@" >"$W/loader.out" 2>"$W/loader.err" &
  LPID=$!
  PIDS+=("$LPID")
  LPIDS+=("$LPID")
  local i
  for i in $(seq 600); do
    grep -q '^ready' "$W/loader.out" && { say "empty_probe: $(cat "$W/loader.out")"; return 0; }
    kill -0 "$LPID" 2>/dev/null || break
    sleep 0.1
  done
  say "empty_probe did not start: $(cat "$W/loader.err")"
  exit 1
}
stop_loader() { # the latest one; waits until its probes are detached
  local t0=$SECONDS
  kill -TERM "$LPID"
  wait "$LPID"
  unset 'LPIDS[-1]'
  say "empty_probe stopped in $((SECONDS - t0)) s"
}
# Programs' ns per run over a command, for the daemon and the loaders, *_multi copies folded.
stat_phase() { # NAME COMMAND...
  local name=$1 p
  shift
  for p in $DPID "${LPIDS[@]}"; do python3 "$HERE/prog_stats.py" "$p" >"$W/$p.0.json"; done
  "$@" >"$W/phase.out" 2>&1
  for p in $DPID "${LPIDS[@]}"; do python3 "$HERE/prog_stats.py" "$p" >"$W/$p.1.json"; done
  python3 - "$name" "$W" $DPID "${LPIDS[@]}" <<'PY' | tee -a "$S"
import json, re, sys
name, w = sys.argv[1], sys.argv[2]
rows = {}
for who in sys.argv[3:]:
    b, a = json.load(open(f"{w}/{who}.0.json")), json.load(open(f"{w}/{who}.1.json"))
    for k, v in a.items():
        base = re.sub(r"_multi?$", "", k.split(":")[0])
        o = b.get(k, {"run_cnt": 0, "run_time_ns": 0})
        r = rows.setdefault(base, [0, 0])
        r[0] += v["run_cnt"] - o["run_cnt"]
        r[1] += v["run_time_ns"] - o["run_time_ns"]
out = {k: {"runs": n, "ns_per_run": round(t / n, 1)} for k, (n, t) in sorted(rows.items()) if n > 0}
print(f"bpf_stats {name}: " + json.dumps(out))
with open(f"{w}/phases.jsonl", "a") as f:
    f.write(json.dumps({"phase": name, "programs": out}) + "\n")
PY
}
# Medians over the call_loop phases: each pair's ns per call, and stallwatch's above the others.
pair_summary() {
  python3 - "$W/phases.jsonl" <<'PY' | tee -a "$S"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def pair(prefix, a, b):
    return statistics.median(x["programs"][a]["ns_per_run"] + x["programs"][b]["ns_per_run"]
                             for x in rows if x["phase"].startswith(prefix))
sw, em, tm = pair("call_loop", "cuda_enter", "cuda_exit"), pair("call_loop", "empty_enter", "empty_exit"), pair("timer", "timer_enter", "timer_exit")
print(f"pairs per call, medians: stallwatch {sw:.0f} ns, timer alone {tm:.0f} ns, empty {em:.0f} ns;"
      f" stallwatch above the timer pair {sw - tm:.0f} ns, above the empty pair {sw - em:.0f} ns")
PY
}

say "== machine: $(uname -r), $(nproc) cpus, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
nvidia-smi -L 2>/dev/null | tee -a "$S"
if [[ -z ${ONLY_TORCH:-} ]]; then
say "== 1. ns per call of call_loop ($CALLS calls of the mock runtime), rounds: untraced, stallwatch"
U=()
T=()
for r in $(seq "$ROUNDS"); do
  U+=("$(per_call)")
  start_daemon --window 1s --db none --library-dirs "$W/lib"
  for i in $(seq 100); do (($(metric_sum stallwatch_attached_probes) > 0)) && break; sleep 0.1; done
  T+=("$(per_call)")
  stop_daemon
  say "round $r: untraced ${U[-1]} ns, stallwatch ${T[-1]} ns"
done
start_loader "$LIB" --sched
E=()
for r in $(seq "$ROUNDS"); do E+=("$(per_call)"); done
say "empty pair: ${E[*]} ns"
mu=$(median "${U[@]}")
mt=$(median "${T[@]}")
me=$(median "${E[@]}")
say "medians: untraced $mu, empty pair $me, stallwatch $mt ns per call"
python3 -c "u,e,t=$mu,$me,$mt; print(f'added: empty {e-u:.0f} ns, stallwatch {t-u:.0f} ns; ratio (stallwatch-untraced)/(empty-untraced) {(t-u)/(e-u):.3f}')" | tee -a "$S"

say "== 2. bpf_stats: the timer pair alone, then the daemon; the empty programs beside both"
sysctl -qw kernel.bpf_stats_enabled=1
start_loader "$LIB" --timer
for r in $(seq "$ROUNDS"); do stat_phase "timer_$r" "$BIN/call_loop" "$LIB" --calls "$CALLS"; done
stop_loader # before the daemon attaches: a timer probe left would warm the daemon's cache lines
start_daemon --window 1s --db none --library-dirs "$W/lib"
for i in $(seq 100); do (($(metric_sum stallwatch_attached_probes) > 0)) && break; sleep 0.1; done
for r in $(seq "$ROUNDS"); do stat_phase "call_loop_$r" "$BIN/call_loop" "$LIB" --calls "$CALLS"; done
pair_summary
stat_phase pingpong_untraced "$BIN/pingpong" --seconds 5
stat_phase pingpong_traced "$BIN/pingpong" --seconds 5 --lib "$LIB"
sysctl -qw kernel.bpf_stats_enabled=0
stop_daemon
kill -TERM "${LPIDS[@]}" # their per-probe links detach in the background
LPIDS=()
fi

RT=$(find /opt /usr/local /usr/lib -name 'libcudart.so.13*' -path '*-packages*' 2>/dev/null | head -1)
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || [[ -z $RT ]]; then
  say "== 3. skipped: no torch with a GPU, or no pip-packaged libcudart.so.13"
  exit 0
fi
say "== 3. bpf_stats on bench/gpu/train_loop.py, ${TORCH_SECONDS}s each: the daemon beside an empty pair on $RT, then the timer pair alone there"
start_loader "$RT"
start_daemon --db "$W/sw.db" --window 2s ${TORCH_FLAGS:-}
sysctl -qw kernel.bpf_stats_enabled=1
stat_phase train_loop taskset -c 0-7 python3 "$HERE/train_loop.py" --seconds "$TORCH_SECONDS" --label daemon
grep '"median_step_ms"' "$W/phase.out" | tail -1 | tee -a "$S"
scrape /metrics >"$W/metrics.txt"
stop_daemon
start_loader "$RT" --timer
stat_phase train_loop_timer taskset -c 0-7 python3 "$HERE/train_loop.py" --seconds "$TORCH_SECONDS" --label timer
sysctl -qw kernel.bpf_stats_enabled=0
grep -E '^stallwatch_(attached_libraries|attached_probes)' "$W/metrics.txt" | tee -a "$S"
say "events lost (non-zero sources): $(grep -E '^stallwatch_events_lost_total' "$W/metrics.txt" | grep -vc ' 0$')"
grep -E 'tracing|call probes|warn|error' "$W/daemon.log" | tail -12 | tee -a "$S"
say "== explain (a calm loop: no chain expected)"
"$BIN/stallwatch" explain --db "$W/sw.db" --since 10m 2>&1 | head -20 | tee -a "$S"
