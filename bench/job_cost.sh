#!/usr/bin/env bash
# What stallwatch costs a job (issue #40), measured so that 1 % can be told from the VM's noise.
#
# A launch-bound stand-in job (call_loop --progress: per period 8 cudaLaunchKernel of
# LAUNCH_CPU_US of CPU each, 2 cudaMemcpyAsync, 1 cudaStreamSynchronize, and a cudaMalloc and
# cudaFree every 16th: 178 calls; each launch reaches the mock driver's cuLaunchKernel underneath,
# as NVIDIA's runtime does) runs without a break, pinned to one CPU, while the
# daemon is started and stopped around it: OFF, ON, OFF, ON, ... PAIRS times, each round
# ROUND_S seconds of the job's own progress (read from a shared counter, so the job makes no
# syscall to report it). An ON round counts only once the daemon has attached to the job's
# library (multi-uprobe links: milliseconds) and ends before it is stopped.
# Each pair also has a FLOOR round: bench/empty_probe's empty uprobe + uretprobe on the same
# functions, the trap alone, which no tracer can go below (a bare uprobe costs microseconds on
# some VMs): OFF, ON, OFF, FLOOR, OFF, ON, ... Each ON and FLOOR round is paired with the mean of
# the OFF rounds on either side of it, so a drift of the host (steal time, a neighbour) over the
# run cancels; the overhead of a pair is 1 - rate(ON) / rate(OFF). Printed: the median over the
# pairs with a 95 % bootstrap interval of the median, for stallwatch and for the floor, the ns
# each adds to a traced call, and the daemon's start-to-attached and stop times.
#
#   sudo bash bench/job_cost.sh              # builds what it needs; ~9 min with the defaults (each pair ~25 s:
#                                          four rounds, and the empty pair detaching its links)
#   sudo PAIRS=30 ROUND_S=4 bash bench/job_cost.sh
#
# Knobs (environment): PAIRS (20), ROUND_S (3), LAUNCH_CPU_US (5: a launch's host cost on a
# GPU), JOB_CPU (the last CPU), PORT (19564, moves up to a free one), BUILD (build), JOBS (1),
# OUT (bench/results/job-cost-latest.json), LAUNCH_LAYER (driver: the daemon's --launch-layer,
# and the same probes for the floor; both: two pairs per launch, as before issue #40),
# DAEMON_ARGS (extra flags for `stallwatch run`, e.g. --cost-budget 0), SETTLE_S (4: how long
# an ON round waits, after the job is traced, for the cost budget to cycle its launches; the
# round then measures the steady state; a job within the budget waits it out), FLOOR_ARGS (extra flags for empty_probe, e.g.
# --entry-only: uprobes without their uretprobes).
# JOB: stand-in (the default, above), or on a GPU host train (bench/gpu/train_loop.py, the H100
# validation's loop) or launch (train_loop.py --launch-bound: 64 small matmuls and one
# synchronize a step, no CUDA graph), each with --progress; their rate is steps/s, and the floor
# is the empty pair on the CUDA libraries the job maps. BIN: a directory of prebuilt stallwatch,
# empty_probe and call_loop (no build; a GPU host without the build tools), with
# LD_LIBRARY_PATH pointing at carried libraries if need be.
# Needs root, taskset, od and python3 (and cmake unless BIN is set). A benchmark: it passes or
# fails nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="${BUILD:-$ROOT/build}"
JOBS="${JOBS:-1}"
PAIRS="${PAIRS:-20}"
ROUND_S="${ROUND_S:-3}"
LAUNCH_CPU_US="${LAUNCH_CPU_US:-5}"
JOB_CPU="${JOB_CPU:-$(($(nproc) - 1))}"
PORT="${PORT:-19564}"
OUT="${OUT:-$ROOT/bench/results/job-cost-latest.json}"
DAEMON_ARGS="${DAEMON_ARGS:-}"
FLOOR_ARGS="${FLOOR_ARGS:-}"
LAUNCH_LAYER="${LAUNCH_LAYER:-driver}"
PYTHON="${PYTHON:-python3}"
JOB="${JOB:-stand-in}"
SETTLE_S="${SETTLE_S:-4}"
declare -i SETTLED=0
BIN="${BIN:-}"
MIX=178  # calls per period of call_loop's mix
case $JOB in
  stand-in) ;;
  train | launch) MIX=0 ;;  # steps/s; no per-call figure
  *) echo "job_cost: JOB=$JOB: expected stand-in, train or launch" >&2; exit 2 ;;
esac

log() { echo "job_cost: $*" >&2; }
die() {
  log "$*"
  exit 1
}
now_ns() { date +%s%N; }

[[ $EUID -eq 0 ]] || die "needs root (uprobes, the daemon); run with sudo"
for tool in taskset od "$PYTHON"; do
  command -v "$tool" >/dev/null || die "needs $tool"
done

if [[ -n $BIN ]]; then
  STALLWATCH=$BIN/stallwatch EMPTY_PROBE=$BIN/empty_probe CALL_LOOP=$BIN/call_loop
  MOCK_DIR=$BIN
else
  command -v cmake >/dev/null || die "needs cmake (or BIN=a directory of prebuilt binaries)"
  [[ -f $BUILD/CMakeCache.txt ]] || cmake -S "$ROOT" -B "$BUILD" >&2
  log "building stallwatch, the mock runtime and driver, call_loop, empty_probe (-j $JOBS)"
  cmake --build "$BUILD" --target stallwatch mock_cudart_mock mock_cuda_mock call_loop \
    empty_probe -j "$JOBS" >&2
  STALLWATCH=$BUILD/stallwatch EMPTY_PROBE=$BUILD/bench/empty_probe
  CALL_LOOP=$BUILD/bench/call_loop MOCK_DIR=$BUILD/mock
fi

# Private copies of the mock runtime and driver: their own inodes, so nothing else traced fires
# in this job. The runtime finds the driver beside it (its RUNPATH is $ORIGIN).
WORK=$(mktemp -d /tmp/stallwatch-job-cost.XXXXXX)
chmod 755 "$WORK"
LIB="$WORK/libcudart.so.12"
DRIVER="$WORK/libcuda.so.1"
if [[ $JOB == stand-in ]]; then
  cp "$MOCK_DIR/libcudart.so.12" "$LIB"
  cp "$MOCK_DIR/libcuda.so.1" "$DRIVER"
fi
JOB_PID=
DAEMON_PID=
FLOOR_PID=
cleanup() {
  set +e
  [[ -n $JOB_PID ]] && kill "$JOB_PID" 2>/dev/null
  [[ -n $DAEMON_PID ]] && kill "$DAEMON_PID" 2>/dev/null
  [[ -n $FLOOR_PID ]] && kill "$FLOOR_PID" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

if [[ $JOB == stand-in ]]; then
  MOCK_CUDA_SYNC_CPU_US=0 MOCK_CUDA_LAUNCH_CPU_US="$LAUNCH_CPU_US" \
    taskset -c "$JOB_CPU" "$CALL_LOOP" "$LIB" --progress "$WORK/progress" \
    --seconds 86400 >"$WORK/job.json" &
else
  # The GPU loops are not pinned: PyTorch's own threads and the DataLoader workers need cores.
  "$PYTHON" "$ROOT/bench/gpu/train_loop.py" --seconds 86400 --report 86400 \
    --progress "$WORK/progress" $([[ $JOB == launch ]] && echo --launch-bound) \
    >"$WORK/job.json" 2>"$WORK/job.err" &
fi
JOB_PID=$!
progress() { od -An -tu8 -N8 "$WORK/progress" 2>/dev/null | tr -d ' \n'; }
for ((i = 0; i < 1200; i++)); do  # a PyTorch job takes seconds to make its first step
  [[ -n $(progress) && $(progress) -gt 0 ]] && break
  kill -0 "$JOB_PID" 2>/dev/null || die "the job exited: $(tail -3 "$WORK/job.err" 2>/dev/null)"
  sleep 0.05
done
[[ -n $(progress) && $(progress) -gt 0 ]] || die "the job made no progress"
if [[ $JOB != stand-in ]]; then
  # The floor goes on the CUDA libraries the job maps (its runtime, the driver, NCCL).
  mapfile -t JOB_LIBS < <(awk '$6 ~ /\/lib(cudart|cuda|nccl)(-[0-9a-f]+)?\.so/ {print $6}' \
    "/proc/$JOB_PID/maps" | sort -u)
  ((${#JOB_LIBS[@]} > 0)) || die "the job maps no CUDA library"
  log "the job maps ${JOB_LIBS[*]}"
else
  JOB_LIBS=("$LIB" "$DRIVER")
fi

# Periods per second over ROUND_S seconds of the job.
round() {
  local a b t0 t1
  t0=$(now_ns)
  a=$(progress)
  sleep "$ROUND_S"
  b=$(progress)
  t1=$(now_ns)
  "$PYTHON" -c "print(($b - $a) / (($t1 - $t0) / 1e9))"
}

# The first port from PORT on that 127.0.0.1 can bind.
free_port() {
  "$PYTHON" - "$PORT" <<'PY' || die "no free port in $PORT..$((PORT + 99))"
import socket, sys
for p in range(int(sys.argv[1]), int(sys.argv[1]) + 100):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue
        print(p)
        sys.exit(0)
sys.exit(1)
PY
}

# A sample's value, "" while the endpoint does not answer yet.
metric() {
  "$PYTHON" - "$URL/metrics" "$1" <<'PY' 2>/dev/null || true
import sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1], timeout=2).read().decode().splitlines():
    parts = line.split()
    if len(parts) == 2 and parts[0] == sys.argv[2]:
        print(parts[1])
PY
}

# Starts the daemon and waits until it traces the job (its libraries attached; the standard
# directories' files may be attached before it); START_MS: the ms taken.
START_MS=0
start_daemon() {
  local t0 i procs port
  t0=$(now_ns)
  port=$(free_port)
  URL="http://127.0.0.1:$port"
  # shellcheck disable=SC2086
  "$STALLWATCH" run --listen "127.0.0.1:$port" --db none --window 1s \
    --launch-layer "$LAUNCH_LAYER" $DAEMON_ARGS >>"$WORK/daemon.log" 2>&1 &
  DAEMON_PID=$!
  for ((i = 0; i < 600; i++)); do
    procs=$(metric stallwatch_traced_processes)
    [[ -n $procs ]] && ((${procs%.*} > 0)) && break
    kill -0 "$DAEMON_PID" 2>/dev/null || die "stallwatch exited; see $WORK/daemon.log"
    sleep 0.02
  done
  [[ -n $procs ]] && ((${procs%.*} > 0)) || die "the job not traced within 12 s"
  START_MS=$((($(now_ns) - t0) / 1000000))
  # The cost budget decides from a window of the job: wait (up to SETTLE_S) for it to cycle the
  # job's launches, so that the round measures the steady state a long job runs in.
  local until=$(($(now_ns) + SETTLE_S * 1000000000))
  while (($(now_ns) < until)); do
    duty_below_one && { SETTLED+=1; break; }
    sleep 0.1
  done
}

# Whether some workload's launch probes are duty-cycled now (stallwatch_probe_duty_ratio < 1).
duty_below_one() {
  "$PYTHON" - "$URL/metrics" <<'PY' 2>/dev/null
import sys, urllib.request
for line in urllib.request.urlopen(sys.argv[1], timeout=2).read().decode().splitlines():
    if line.startswith("stallwatch_probe_duty_ratio{") and float(line.split()[-1]) < 1:
        sys.exit(0)
sys.exit(1)
PY
}

STOP_MS=0
stop_daemon() {
  local t0
  t0=$(now_ns)
  kill "$DAEMON_PID"
  wait "$DAEMON_PID" 2>/dev/null || true
  DAEMON_PID=
  STOP_MS=$((($(now_ns) - t0) / 1000000))
}

# The empty pair on the job's library, attached until stop_floor.
start_floor() {
  local i
  # shellcheck disable=SC2086
  "$EMPTY_PROBE" "${JOB_LIBS[@]}" --launch-layer "$LAUNCH_LAYER" $FLOOR_ARGS \
    >"$WORK/floor.out" 2>"$WORK/floor.err" &
  FLOOR_PID=$!
  for ((i = 0; i < 600; i++)); do
    grep -q '^ready' "$WORK/floor.out" && return 0
    kill -0 "$FLOOR_PID" 2>/dev/null || die "empty_probe exited: $(cat "$WORK/floor.err")"
    sleep 0.05
  done
  die "empty_probe not ready after 30 s"
}

stop_floor() {
  kill "$FLOOR_PID"
  wait "$FLOOR_PID" 2>/dev/null || true
  FLOOR_PID=
}

log "job on CPU $JOB_CPU (launch $LAUNCH_CPU_US us of CPU); $PAIRS pairs of $ROUND_S s rounds"
round >/dev/null  # warm-up
OFF=("$(round)")
ON=()
FLOOR=()
STARTS=()
STOPS=()
for ((k = 1; k <= PAIRS; k++)); do
  start_daemon
  STARTS+=("$START_MS")
  ON+=("$(round)")
  stop_daemon
  STOPS+=("$STOP_MS")
  OFF+=("$(round)")
  start_floor
  FLOOR+=("$(round)")
  stop_floor
  OFF+=("$(round)")
  log "pair $k/$PAIRS: off ${OFF[2 * k - 2]%.*}, on ${ON[k - 1]%.*}, off ${OFF[2 * k - 1]%.*}," \
    "floor ${FLOOR[k - 1]%.*}, off ${OFF[2 * k]%.*} periods/s"
done

mkdir -p "$(dirname "$OUT")"
JOB="$JOB" LAUNCH_LAYER="$LAUNCH_LAYER" DAEMON_ARGS="$DAEMON_ARGS" FLOOR_ARGS="$FLOOR_ARGS" \
  SETTLE_S="$SETTLE_S" SETTLED="$SETTLED" "$PYTHON" - "$OUT" "$MIX" "$LAUNCH_CPU_US" "$ROUND_S" "$(nproc)" "${OFF[*]}" "${ON[*]}" \
  "${STARTS[*]}" "${STOPS[*]}" "${FLOOR[*]}" <<'PY'
import json, os, random, statistics, sys, datetime
out, mix, launch_us, round_s, cpus = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
off = [float(x) for x in sys.argv[6].split()]
on = [float(x) for x in sys.argv[7].split()]
starts = [int(x) for x in sys.argv[8].split()]
stops = [int(x) for x in sys.argv[9].split()]
floor = [float(x) for x in sys.argv[10].split()]
# Round order OFF0 ON1 OFF1 FLOOR1 OFF2 ON2 OFF3 ...: ON k sits between OFF 2k and 2k+1, FLOOR k
# between OFF 2k+1 and 2k+2; each against the mean of its two neighbours.
def overheads(rates, first):
    return [1 - r / ((off[first + 2 * k] + off[first + 2 * k + 1]) / 2) for k, r in enumerate(rates)]
rng = random.Random(42)
def summary(pairs):
    boot = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(10000))
    return statistics.median(pairs), [boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]]
sw = overheads(on, 0)
fl = overheads(floor, 1)
sw_med, sw_ci = summary(sw)
fl_med, fl_ci = summary(fl)
job = os.environ.get("JOB", "stand-in")
# The stand-in's rate is in periods of `mix` calls; a GPU job's in steps.
unit = mix if mix else 1
off_rate = statistics.median(off) * unit
on_rate = statistics.median(on) * unit
floor_rate = statistics.median(floor) * unit
result = {
    "date": datetime.date.today().isoformat(),
    "job": job,
    "cpus": cpus,
    "launch_cpu_us": launch_us if mix else None,
    "launch_layer": os.environ.get("LAUNCH_LAYER", "driver"),
    "daemon_args": os.environ.get("DAEMON_ARGS", ""),
    "floor_args": os.environ.get("FLOOR_ARGS", ""),
    "round_s": round_s,
    "pairs": len(sw),
    # ON rounds in which the cost budget cycled the job's launches (each waited up to settle_s
    # after the job was traced for it, then measured the steady state).
    "settle_s": float(os.environ.get("SETTLE_S", "0")),
    "on_rounds_cycled": int(os.environ.get("SETTLED", "0")),
    "overhead_median": sw_med,
    "overhead_ci95": sw_ci,
    "overhead_per_pair": sw,
    "floor_overhead_median": fl_med,
    "floor_overhead_ci95": fl_ci,
    "floor_overhead_per_pair": fl,
    "daemon_start_to_attached_ms_median": statistics.median(starts),
    "daemon_stop_ms_median": statistics.median(stops),
}
what = "calls" if mix else "steps"
result.update({
    f"{what}_per_s_off_median": off_rate,
    f"{what}_per_s_on_median": on_rate,
    f"{what}_per_s_floor_median": floor_rate,
    f"ns_per_{what[:-1]}_added": 1e9 / on_rate - 1e9 / off_rate,
    f"ns_per_{what[:-1]}_added_floor": 1e9 / floor_rate - 1e9 / off_rate,
})
with open(out, "w") as f:
    json.dump(result, f, indent=1)
    f.write("\n")
load = (f"launch-bound stand-in ({launch_us:g} us of CPU a launch, {mix} calls a period"
        if mix else f"PyTorch loop '{job}' (steps")
print(f"job cost, {load}, launches probed at the {result['launch_layer']} layer), "
      f"{len(sw)} pairs of {round_s:g} s rounds:")
print(f"  stallwatch: overhead median {sw_med * 100:.2f} %, 95 % interval "
      f"[{sw_ci[0] * 100:.2f} %, {sw_ci[1] * 100:.2f} %], "
      f"{result[f'ns_per_{what[:-1]}_added']:.0f} ns added per {what[:-1]}")
print(f"  empty uprobe pair (the floor): median {fl_med * 100:.2f} %, 95 % interval "
      f"[{fl_ci[0] * 100:.2f} %, {fl_ci[1] * 100:.2f} %], "
      f"{result[f'ns_per_{what[:-1]}_added_floor']:.0f} ns added per {what[:-1]}")
print(f"  {what}/s: without {off_rate:,.0f}, under stallwatch {on_rate:,.0f}, under the empty pair {floor_rate:,.0f}")
print(f"  ON rounds with the job's launches duty-cycled by the cost budget: "
      f"{result['on_rounds_cycled']} of {len(sw)}")
print(f"  daemon start to attached {result['daemon_start_to_attached_ms_median']} ms, "
      f"stop {result['daemon_stop_ms_median']} ms (medians)")
print(f"  written to {out}")
PY
