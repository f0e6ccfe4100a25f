#!/usr/bin/env bash
# The GPU-host checks the third wave's issues left for a machine with a GPU, in one run sized
# for a lent device (15 minutes in all, start included):
#   limit  #36 item 5: the PyTorch loop in a cgroup with a CPU limit names cpu_throttle; the calm
#          loop before it opens no chain on that VM, whatever its own steal and IRQ time.
#   nvml   #39 item 5: NVML as the daemon reads it (stallwatch_gpu_*) beside nvidia-smi, under
#          load; `check`'s nvml and xid lines.
#   power  #39 item 5: a GPU-bound loop (large bf16 matmuls), then the GPU's power limit lowered
#          to its minimum under it: gpu_throttle naming sw_power_cap (restored on any exit).
#   cost_launch, cost_train  #40: bench/job_cost.sh on the launch-bound PyTorch loop and on the
#          validation's training loop (daemon on and off in paired rounds, median overhead with
#          a 95 % bootstrap interval).
# Usage, as root:  bash bench/gpu/wave3.sh BINDIR OUTDIR
#   BINDIR from bench/gpu/pack.sh (stallwatch, empty_probe, call_loop: wrappers that bring their
#   own libraries, so that python3 and torch keep the host's).
#   STAGES (default "machine limit nvml power cost_launch cost_train") picks and orders stages;
#   about 1.5 + 1 + 1 + 1 + 4 + 2.5 minutes. Each stage writes its files as it ends, so a run cut
#   short keeps what it finished: run the first four and cost_launch in one call, cost_train in
#   the next if time is left. PHASE (20 s), LIMIT ("50000 100000": cpu.max's quota and period),
#   PAIRS (20 launch-bound, TRAIN_PAIRS 12), ROUND_S (2), PORT (19474), PYTHON (python3 with torch).
# A validation: it prints what it saw (OUTDIR/summary.txt) and judges each check in one line
# (PASS, FAIL, or SKIP with why); the exit status is the number of FAIL lines.
set -uo pipefail
BINDIR=$(cd "${1:?BINDIR (bench/gpu/pack.sh)}" && pwd)
OUT=$(mkdir -p "${2:?OUTDIR}" && cd "$2" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SW=$BINDIR/stallwatch
STAGES=${STAGES:-machine limit nvml power cost_launch cost_train}
PHASE=${PHASE:-20}
LIMIT=${LIMIT:-50000 100000}
PAIRS=${PAIRS:-20}
TRAIN_PAIRS=${TRAIN_PAIRS:-12}
ROUND_S=${ROUND_S:-2}
PORT=${PORT:-19474}
PYTHON=${PYTHON:-python3}
DB=$OUT/wave3.db
S=$OUT/summary.txt
FAILS=0
say() { printf '%s\n' "$*" | tee -a "$S"; }
judge() {  # judge PASS|FAIL|SKIP CHECK WHY
  say "$1: $2: $3"
  [[ $1 != FAIL ]] || FAILS=$((FAILS + 1))
}
scrape() {  # no curl on some GPU hosts
  "$PYTHON" - "$PORT" "$1" <<'PY'
import sys, urllib.request
try:
    sys.stdout.write(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=5).read().decode())
except Exception as e:
    print(f"# scrape failed: {e}")
PY
}
# chains_for PID KIND: chains of KIND the store holds for PID ("any" for every kind).
chains_for() {
  local where="1 = 1"
  [[ $2 == any ]] || where="kind = '$2'"
  "$SW" query --db "$DB" --format csv \
    "SELECT count(*) FROM chains WHERE pid = $1 AND $where" 2>/dev/null | tr -d '\r' | tail -1
}
steal_irq() {  # the host's steal and irq+softirq share of all CPU time since the last call
  read -r _ u n s i w q sq st _ < /proc/stat
  local total=$((u + n + s + i + w + q + sq + st))
  if [[ -n ${LAST_TOTAL:-} ]]; then
    awk -v st=$((st - LAST_ST)) -v irq=$((q + sq - LAST_IRQ)) -v t=$((total - LAST_TOTAL)) \
      'BEGIN { if (t > 0) printf "steal %.1f%%, irq %.1f%%", 100 * st / t, 100 * irq / t }'
  fi
  LAST_TOTAL=$total LAST_ST=$st LAST_IRQ=$((q + sq))
}
loop() {  # loop LABEL [ARGS...]: the training loop for PHASE s, its JSON lines in OUT/LABEL.jsonl
  local label=$1
  shift
  "$PYTHON" "$HERE/train_loop.py" --seconds "$PHASE" --report 5 --label "$label" "$@" \
    > "$OUT/$label.jsonl" 2> "$OUT/$label.err"
}
rate_of() {  # the median steps/s of a loop's reports after the first
  "$PYTHON" - "$OUT/$1.jsonl" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"steps_per_s"' in l]
v = sorted(x["steps_per_s"] for x in (r[1:] or r))
print(v[len(v) // 2] if v else "none")
PY
}
pid_of() { "$PYTHON" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["pid"])' "$OUT/$1.jsonl" 2>/dev/null; }

DPID=
start_daemon() {
  "$SW" run --listen "127.0.0.1:$PORT" --db "$DB" --window 2s --kube-api none \
    --metrics.identity-labels cgroup > "$OUT/daemon.log" 2>&1 &
  DPID=$!
  for _ in $(seq 150); do
    [[ $(scrape /healthz) == *ok* ]] && return 0
    kill -0 "$DPID" 2>/dev/null || break
    sleep 0.2
  done
  say "the daemon did not become ready:"; tail -20 "$OUT/daemon.log" | tee -a "$S"
  DPID=
  return 1
}
stop_daemon() {
  [[ -n $DPID ]] || return 0
  scrape /metrics > "$OUT/metrics-$1.txt"
  kill -TERM "$DPID"; wait "$DPID"; say "daemon exit $?"
  DPID=
}

POWER_RESTORE=
CG=
cleanup() {
  [[ -z $POWER_RESTORE ]] || nvidia-smi -i 0 -pl "$POWER_RESTORE" > /dev/null 2>&1
  [[ -z $CG ]] || rmdir "$CG" 2>/dev/null
  [[ -z $DPID ]] || kill -TERM "$DPID" 2>/dev/null
  pkill -f "$HERE/train_loop.py" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT

stage_machine() {
  say "== machine"
  { date -u; uname -r; nvidia-smi -L; nproc; stat -fc %T /sys/fs/cgroup; cat /proc/self/cgroup
    "$PYTHON" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
    "$SW" --version; } 2>&1 | tee -a "$S"
  "$SW" check 2>&1 | tee "$OUT/check.txt" | grep -E "^(ok|warn|fail)|nvml|xid|multi" | tee -a "$S"
}

# The job's cgroup for the limit: a child of the cgroup v2 root, or of the v1 cpu hierarchy.
make_limited_cgroup() {
  local quota=${LIMIT% *} period=${LIMIT#* } v1
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
    CG=/sys/fs/cgroup/stallwatch-wave3-limit
    mkdir -p "$CG" && echo "$quota $period" > "$CG/cpu.max" || return 1
  else
    v1=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/mounts)
    [[ -n $v1 ]] || return 1
    CG=$v1/stallwatch-wave3-limit
    mkdir -p "$CG" && echo "$period" > "$CG/cpu.cfs_period_us" &&
      echo "$quota" > "$CG/cpu.cfs_quota_us" || return 1
  fi
}
throttled_periods() { awk '$1 == "nr_throttled" { print $2 }' "$CG/cpu.stat"; }

stage_limit() {
  say "== limit (#36 item 5): calm, then the loop with a CPU limit of $LIMIT"
  [[ -n $DPID ]] || start_daemon || { judge FAIL limit "no daemon"; return; }
  steal_irq > /dev/null
  loop calm
  local weather pid n
  weather=$(steal_irq)
  sleep 5  # two windows: a chain's last window reaches the store
  pid=$(pid_of calm)
  n=$(chains_for "$pid" any)
  say "calm loop: $(rate_of calm) steps/s, host $weather, chains for PID $pid: $n"
  "$SW" explain --db "$DB" --since 2m > "$OUT/explain-calm.txt" 2>&1
  [[ $n == 0 ]] && judge PASS calm "no chain ($weather)" ||
    judge FAIL calm "$n chain(s) for a calm loop ($weather): see explain-calm.txt"
  make_limited_cgroup || { judge SKIP limit "could not make a cgroup with a CPU limit"; return; }
  local before
  before=$(throttled_periods)
  steal_irq > /dev/null
  ( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$PYTHON" "$HERE/train_loop.py" --seconds "$PHASE" \
      --report 5 --label limited > "$OUT/limited.jsonl" 2> "$OUT/limited.err" )
  sleep 5
  pid=$(pid_of limited)
  say "limited loop: $(rate_of limited) steps/s; the kernel throttled it in $(($(throttled_periods) - before)) periods; host $(steal_irq)"
  "$SW" explain --db "$DB" --since 1m > "$OUT/explain-limited.txt" 2>&1
  sed -n 1,25p "$OUT/explain-limited.txt" | tee -a "$S"
  grep -E "^stallwatch_cgroup_cpu_(throttled_seconds_total|limit_cores)" <(scrape /metrics) | tee -a "$S"
  n=$(chains_for "$pid" cpu_throttle)
  [[ $n -ge 1 ]] && judge PASS limit "cpu_throttle for the limited loop ($n)" ||
    judge FAIL limit "no cpu_throttle chain for PID $pid (kinds: $("$SW" query --db "$DB" --format csv "SELECT group_concat(kind) FROM chains WHERE pid = $pid" 2>/dev/null | tr -d '\r' | tail -1))"
  rmdir "$CG" 2>/dev/null; CG=
}

stage_nvml() {
  say "== nvml (#39 item 5): the daemon's GPU readings beside nvidia-smi, under load"
  [[ -n $DPID ]] || start_daemon || { judge FAIL nvml "no daemon"; return; }
  PHASE=15 loop nvml-load --gpu-bound &
  local job=$!
  sleep 10
  nvidia-smi --query-gpu=index,pci.bus_id,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,power.limit,clocks_event_reasons.active \
    --format=csv 2>&1 | tee "$OUT/nvidia-smi.csv" | tee -a "$S"
  scrape /metrics | grep -E "^stallwatch_(gpu_|workload_gpu_info)" | tee "$OUT/gpu-metrics.txt" | tee -a "$S"
  nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE > "$OUT/nvidia-smi-q.txt" 2>&1
  wait "$job"
  local clock
  clock=$(awk '/^stallwatch_gpu_sm_clock_hertz\{[^}]*gpu="0"/ { print $NF / 1e6 }' "$OUT/gpu-metrics.txt")
  [[ -n $clock ]] && judge PASS nvml "GPU 0 SM clock $clock MHz on /metrics (nvidia-smi above)" ||
    judge FAIL nvml "no stallwatch_gpu_sm_clock_hertz for GPU 0 (check.txt, daemon.log)"
  grep -q 'stallwatch_workload_gpu_info' "$OUT/gpu-metrics.txt" &&
    judge PASS gpu_mapping "the loop's process mapped to a GPU" ||
    judge FAIL gpu_mapping "no stallwatch_workload_gpu_info while the loop ran"
}

stage_power() {
  say "== power (#39 item 5): a GPU-bound loop, its power limit lowered to the minimum mid-run"
  [[ -n $DPID ]] || start_daemon || { judge FAIL power "no daemon"; return; }
  local now min
  read -r now min < <(nvidia-smi -i 0 --query-gpu=power.limit,power.min_limit --format=csv,noheader,nounits | tr -d ',' )
  [[ -n ${min:-} ]] || { judge SKIP power "nvidia-smi reads no power limits"; return; }
  say "power limit ${now} W, minimum ${min} W"
  PHASE=$((2 * PHASE)) loop power --gpu-bound &
  local job=$!
  sleep $((PHASE))
  if nvidia-smi -i 0 -pl "$min" >> "$S" 2>&1; then
    POWER_RESTORE=$now
  else
    wait "$job"; judge SKIP power "nvidia-smi could not lower the power limit (above)"; return
  fi
  wait "$job"
  nvidia-smi -i 0 -pl "$now" >> "$S" 2>&1 && POWER_RESTORE=
  sleep 5
  local pid n
  pid=$(pid_of power)
  grep '"steps_per_s"' "$OUT/power.jsonl" | tee -a "$S"
  grep -E '^stallwatch_gpu_clock_throttle_seconds_total' <(scrape /metrics) | tee -a "$S"
  "$SW" explain --db "$DB" --since 1m > "$OUT/explain-power.txt" 2>&1
  sed -n 1,25p "$OUT/explain-power.txt" | tee -a "$S"
  n=$(chains_for "$pid" gpu_throttle)
  [[ $n -ge 1 ]] && judge PASS power "gpu_throttle for the capped loop ($n)" ||
    judge FAIL power "no gpu_throttle for PID $pid (did the steps slow? above)"
}

stage_cost() {  # stage_cost launch|train PAIRS
  say "== cost_$1 (#40): bench/job_cost.sh JOB=$1, $2 pairs of $ROUND_S s rounds"
  stop_daemon "before-cost"
  BIN=$BINDIR JOB=$1 PAIRS=$2 ROUND_S=$ROUND_S PYTHON=$PYTHON OUT="$OUT/job-cost-$1.json" \
    bash "$HERE/../job_cost.sh" > "$OUT/job-cost-$1.txt" 2>&1
  local rc=$?
  tail -15 "$OUT/job-cost-$1.txt" | tee -a "$S"
  [[ $rc == 0 ]] && judge PASS "cost_$1" "measured (above)" || judge FAIL "cost_$1" "job_cost.sh exit $rc"
}

for stage in $STAGES; do
  case $stage in
    machine | limit | nvml | power) "stage_$stage" ;;
    cost_launch) stage_cost launch "$PAIRS" ;;
    cost_train) stage_cost train "$TRAIN_PAIRS" ;;
    *) judge FAIL "$stage" "no such stage (machine limit nvml power cost_launch cost_train)" ;;
  esac
done
stop_daemon end
grep -E "^(PASS|FAIL|SKIP):" "$S"
exit "$FAILS"
