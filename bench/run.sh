#!/usr/bin/env bash
# bench/run.sh: the benchmark behind DESIGN.md "Performance targets" (run as root; `make bench`
# calls it). Builds what it needs, then measures in one run:
#  1. per-call cost, in ROUNDS interleaved rounds of three variants (order rotated each round):
#     untraced, an empty uprobe+uretprobe pair (bench/empty_probe), and the real daemon;
#     reports medians, the added ns of each over untraced and (daemon-untraced)/(empty-untraced);
#  2. daemon cost: its CPU (utime+stime, % of one core), RSS, lost events and calls counted while
#     call_loop paces RATES calls/s (over RATE_THREADS threads) for RATE_SECONDS each, and idle;
#     then at SCALE_RATE calls/s over SCALE_THREADS threads of one process and over
#     SCALE_PROCESSES processes, each in a cgroup of its own;
#  3. BPF program run time (kernel.bpf_stats_enabled) per run: sched_switch/sched_wakeup under a
#     pipe ping-pong of untraced and of traced threads beside empty programs on the same
#     tracepoints (the floor), cuda_enter/cuda_exit and the empty pair, the timer pair alone
#     (empty_probe --timer: the floor of any per-thread call timer),
#     block_io_start/done under O_DIRECT reads from an unwatched and from a watched cgroup;
#  4. engine and store (user space only, bench/engine_bench): ring-buffer records/s through the
#     chain engine, Engine::observe per window, store rows/s and MiB/hour, explain over 24 h;
#  5. exposition (user space only, bench/exposition_bench): /metrics latency over real HTTP,
#     render cost, body size, OTLP encode time and size, for 16..1024 cgroup series.
# Writes bench/results/latest.json and prints a table. Knobs (environment): ROUNDS, CALLS,
# RATES, RATE_SECONDS, RATE_THREADS, SCALE_RATE, SCALE_THREADS, SCALE_PROCESSES, IDLE_SECONDS, PINGPONG_SECONDS, IO_READS, PORT, BUILD, JOBS, OUT,
# ENGINE_REPS, ENGINE_CPU, ENGINE_DIR, EXPO_REPS, EXPO_MAX_SECONDS, EXPO_CPU, EXPO_CGROUPS,
# EXPO_PORT, and ONLY=engine / ONLY=exposition: part 4 / part 5 alone, without root; each
# replaces only its own key of OUT ("engine" / "exposition"), creating OUT when missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
ROUNDS="${ROUNDS:-7}"
CALLS="${CALLS:-200000}"
RATES="${RATES:-10000 100000 300000}"
RATE_SECONDS="${RATE_SECONDS:-10}"
SCALE_RATE="${SCALE_RATE:-100000}"
SCALE_THREADS="${SCALE_THREADS:-1 4 16}"
SCALE_PROCESSES="${SCALE_PROCESSES:-4 16}"
RATE_THREADS="${RATE_THREADS:-$(nproc)}"
IDLE_SECONDS="${IDLE_SECONDS:-5}"
PINGPONG_SECONDS="${PINGPONG_SECONDS:-5}"
IO_READS="${IO_READS:-20000}"
PORT="${PORT:-19464}"
JOBS="${JOBS:-1}"
OUT="${OUT:-$ROOT/bench/results/latest.json}"
ONLY="${ONLY:-}"
ENGINE_REPS="${ENGINE_REPS:-5}"
ENGINE_CPU="${ENGINE_CPU:-0}"
ENGINE_DIR="${ENGINE_DIR:-/tmp}"
EXPO_REPS="${EXPO_REPS:-100}"
EXPO_MAX_SECONDS="${EXPO_MAX_SECONDS:-10}"
EXPO_CPU="${EXPO_CPU:-0}"
EXPO_CGROUPS="${EXPO_CGROUPS:-16,64,256,1024}"
EXPO_PORT="${EXPO_PORT:-$((PORT + 100))}"

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ---------------------------------------------------------------------------------------------
# 4. Engine and store: user space only (no root, no kernel objects), one thread pinned to
# ENGINE_CPU, ENGINE_REPS repetitions, medians. Defined here so that ONLY=engine can run it alone.
ENGINE_JSON="$BUILD/bench/engine.json"
run_engine() {
  log "building engine_bench (-j $JOBS)"
  [[ -f $BUILD/CMakeCache.txt ]] || cmake -S "$ROOT" -B "$BUILD" >&2
  cmake --build "$BUILD" --target engine_bench -j "$JOBS" >&2
  log "engine_bench: ring records, Engine::observe, store, explain over 24 h (databases in $ENGINE_DIR)"
  rm -f "$ENGINE_JSON"
  "$BUILD/bench/engine_bench" --cpu "$ENGINE_CPU" --reps "$ENGINE_REPS" --dir "$ENGINE_DIR" \
    --out "$ENGINE_JSON" >&2
}
# OUT.KEY = the object a part's binary wrote to FILE (+ date, revision, machine); the rest of
# OUT stays, so ONLY=engine / ONLY=exposition replace only their own key.
merge_part() { # KEY FILE
  local base='{}'
  mkdir -p "$(dirname "$OUT")"
  [[ -s $OUT ]] && base=$(<"$OUT")
  jq --arg key "$1" --slurpfile e "$2" --arg date "$(date -u +%FT%TZ)" \
    --arg revision "$(git -C "$ROOT" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)" \
    --arg cpu "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" --argjson nproc "$(nproc)" \
    --arg kernel "$(uname -r)" \
    '.[$key] = ({date: $date, revision: $revision, kernel: $kernel, cpu_model: $cpu, nproc: $nproc} + $e[0])' \
    <<<"$base" >"$OUT.tmp"
  mv "$OUT.tmp" "$OUT"
}
merge_engine() { merge_part engine "$ENGINE_JSON"; }
engine_table() {
  echo "engine and store (user space only; 1 thread on CPU $(jq -r .engine.cpu "$OUT"), median of $(jq -r .engine.reps "$OUT"))"
  jq -r 'def r(n): if . == null then "-" else (. * pow(10; n) | round) / pow(10; n) | tostring end;
    .engine as $e
    | "part\tmeasure\tvalue\ttarget",
      (select($e.ring) | $e.ring
       | "ring -> engine\trecords/s (ns/record)\t\(.records_per_s / 1e6 | r(2)) M (\(.ns_per_record | r(1)) ns)\t>= 1 M",
         "ring -> engine\tadd ns/record; drain, window us per 100k\t\(.add_ns_per_record | r(1)); \(.drain_us_per_window | r(0)), \(.pipeline_us_per_window | r(0))\t-"),
      ($e.observe // [] | .[] | "observe \(.processes) x \(.calls)\tus/window (diff_windows)\t\(.us_per_window | r(1)) (\(.diff_us_per_window | r(1)))\t-"),
      (select($e.store) | $e.store
       | "store \(.processes) x \(.calls)\trows/s, commit per window (all queued)\t\(.rows_per_s | r(0)) (\(.rows_per_s_bulk | r(0)))\t-",
         "store 1 h, \(.hour.processes) x \(.hour.calls_per_process)\tMiB/hour (bytes/row)\t\(.hour.mib_per_hour | r(2)) (\(.hour.bytes_per_row | r(0)))\t-"),
      (select($e.explain) | $e.explain
       | "explain 24 h\tms default / --per-process\t\(.default_ms | r(1)) / \(.per_process_ms | r(1))\t< 1000",
         "explain 24 h\tDB: windows, chains, MiB, generation s\t\(.windows), \(.chains), \(.db_bytes / 1048576 | r(0)), \(.generate_s | r(1))\t-")' \
    "$OUT" | column -t -s $'\t'
}

# ---------------------------------------------------------------------------------------------
# 5. Exposition: user space only (no root, no kernel objects). The real HTTP server on 127.0.0.1
# (from EXPO_PORT up) and libcurl, render_text alone, the OTLP encoder and gzip, for snapshots of
# EXPO_CGROUPS cgroup series; everything pinned to EXPO_CPU; each measurement EXPO_REPS times
# (fewer after EXPO_MAX_SECONDS, at least 5). Defined here so that ONLY=exposition can run it alone.
EXPO_JSON="$BUILD/bench/exposition.json"
run_exposition() {
  log "building exposition_bench (-j $JOBS)"
  [[ -f $BUILD/CMakeCache.txt ]] || cmake -S "$ROOT" -B "$BUILD" >&2
  cmake --build "$BUILD" --target exposition_bench -j "$JOBS" >&2
  log "exposition_bench: /metrics over HTTP, render, OTLP encode for $EXPO_CGROUPS cgroups"
  rm -f "$EXPO_JSON"
  "$BUILD/bench/exposition_bench" --cpu "$EXPO_CPU" --reps "$EXPO_REPS" \
    --max-seconds "$EXPO_MAX_SECONDS" --cgroups "$EXPO_CGROUPS" --port "$EXPO_PORT" \
    --out "$EXPO_JSON" >&2
}
merge_exposition() { merge_part exposition "$EXPO_JSON"; }
exposition_table() {
  echo "exposition (user space only; 1 CPU $(jq -r .exposition.cpu "$OUT") incl. the HTTP server threads; $(jq -r .exposition.mix "$OUT") mix; up to $(jq -r .exposition.reps "$OUT") reps or $(jq -r .exposition.max_seconds "$OUT") s each)"
  jq -r 'def r(n): if . == null then "-" else (. * pow(10; n) | round) / pow(10; n) | tostring end;
    .exposition as $x
    | "cgroups\tsample lines\tbody MB (gzip)\trender ms (prometheus-cpp)\tGET /metrics gzip, fresh: ms median / p99 / max (reps)\tplain / cached ms\tOTLP encode ms expl / exp\tOTLP MB (gzip), requests\tsnapshot MB\trender peak MB\ttarget",
      ($x.points[] | "\(.cgroups)\t\(.sample_lines)\t\(.body_bytes / 1e6 | r(1)) (\(.body_gzip_bytes / 1e6 | r(2)))\t\(.render.median_ms | r(1)) (\(.render_prometheus_cpp.median_ms | r(0)))\t\(.http.latency.median_ms | r(1)) / \(.http.latency.p99_ms | r(1)) / \(.http.latency.max_ms | r(1)) (\(.http.latency.reps))\t\(.http.plain.median_ms | r(1)) / \(.http.cached.median_ms | r(1))\t\(.otlp.explicit.encode.median_ms | r(1)) / \(.otlp.exponential.encode.median_ms | r(1))\t\(.otlp.explicit.bytes / 1e6 | r(2)) (\(.otlp.explicit.gzip_bytes / 1e6 | r(2))), \(.otlp.explicit.requests)\t\(.snapshot.rss_delta_kb / 1024 | r(1))\t\((.render_peak_rss_kb - .render_rss_before_kb) / 1024 | r(0))\t\(if .cgroups == $x.target.cgroups then "p99 <= \($x.target.p99_ms) ms: \(if .http.pass then "met" else "MISSED" end)" else "-" end)")' \
    "$OUT" | column -t -s $'\t'
}

if [[ $ONLY == exposition ]]; then
  for tool in cmake jq; do
    command -v "$tool" >/dev/null || die "$tool not found"
  done
  run_exposition
  merge_exposition
  log "wrote .exposition of $OUT"
  exposition_table
  exit 0
fi
if [[ $ONLY == engine ]]; then
  for tool in cmake jq; do
    command -v "$tool" >/dev/null || die "$tool not found"
  done
  run_engine
  merge_engine
  log "wrote .engine of $OUT"
  engine_table
  exit 0
fi
[[ -z $ONLY || $ONLY == all ]] || die "ONLY=$ONLY: the parts that run alone are ONLY=engine and ONLY=exposition"

[[ $(id -u) -eq 0 ]] || die "run as root: uprobes, the daemon and bpf_stats need it (ONLY=engine and ONLY=exposition do not)"
for tool in cmake curl jq bpftool sysctl; do
  command -v "$tool" >/dev/null || die "$tool not found"
done

log "building stallwatch, mock_cudart_mock, empty_probe, call_loop, pingpong, engine_bench, exposition_bench (-j $JOBS)"
cmake --build "$BUILD" --target stallwatch mock_cudart_mock empty_probe call_loop pingpong \
  engine_bench exposition_bench -j "$JOBS" >&2

# A private copy of the mock runtime: its own inode, so probes that tests or other tools hold on
# build/mock/libcudart.so.12 never fire in this loop (nor ours in theirs). Same bytes, same name.
WORK="$BUILD/bench/run"
rm -rf "$WORK"
mkdir -p "$WORK/lib" "$(dirname "$OUT")"
LIB="$WORK/lib/libcudart.so.12"
cp "$BUILD/mock/libcudart.so.12" "$LIB"
export MOCK_CUDA_SYNC_CPU_US=0
CALL_LOOP="$BUILD/bench/call_loop"
URL=

LOADER_PID=
DAEMON_PID=
WARM_PID=
STATS_WAS=
# Also on failure: nothing of ours stays attached or running, bpf_stats goes back as it was.
cleanup() {
  [[ -n $WARM_PID ]] && stop_pid "$WARM_PID" 5
  [[ -n $LOADER_PID ]] && stop_pid "$LOADER_PID" 60
  [[ -n $DAEMON_PID ]] && stop_pid "$DAEMON_PID" 60
  [[ -n $STATS_WAS ]] && sysctl -qw kernel.bpf_stats_enabled="$STATS_WAS"
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

alive() { # PID: running and not a zombie
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ ${s:0:1} != Z ]]
}

stop_pid() { # PID LIMIT_S: SIGTERM, wait up to LIMIT_S seconds, then SIGKILL
  local pid=$1 limit=$2 i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < limit * 10; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    log "pid $pid still running ${limit}s after SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

now_ms() { date +%s%3N; }

# Sum of every sample of one metric family in the daemon's exposition (0 when absent).
metric() {
  curl -s --max-time 5 "$URL/metrics" |
    awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%.0f\n", s }'
}

# Uprobes on our library copy held by any process but our loader and daemon: another stallwatch
# that saw our call_loop map it. Samples taken while any exist are set aside.
# Another stallwatch's multi-uprobe links are not perf events and bpftool lists no owner pids:
# any other stallwatch process counts as one (it attaches the copy once call_loop maps it).
foreign_probes() {
  local perf others
  perf=$(bpftool perf show -j 2>/dev/null |
    jq --arg f "$LIB" --argjson mine "[${LOADER_PID:-0},${DAEMON_PID:-0}]" \
      '[.[] | select((.filename // "") | endswith($f)) | select(.pid | IN($mine[]) | not)] | length')
  others=$( (pgrep -x stallwatch || true) | grep -vcx "${DAEMON_PID:-0}" || true)
  echo $((${perf:-0} + others))
}

start_loader() { # [--sched]: also the empty scheduler programs (the floor of sched_switch/wakeup)
  "$BUILD/bench/empty_probe" "$LIB" "$@" >"$WORK/loader.out" 2>"$WORK/loader.err" &
  LOADER_PID=$!
  local i
  for ((i = 0; i < 300; i++)); do
    grep -q '^ready' "$WORK/loader.out" && return 0
    alive "$LOADER_PID" || die "empty_probe exited: $(cat "$WORK/loader.err")"
    sleep 0.1
  done
  die "empty_probe not ready after 30 s"
}

stop_loader() {
  stop_pid "$LOADER_PID" 60
  LOADER_PID=
}

free_port() { # first port from PORT up that nothing listens on
  local p
  for ((p = PORT; p < PORT + 100; p++)); do
    [[ -z $(ss -Hltn "sport = :$p" 2>/dev/null) ]] && {
      echo "$p"
      return
    }
  done
  die "no free port in $PORT..$((PORT + 99))"
}

DAEMON_START_MS=0
start_daemon() {
  local t0 i code probes port
  t0=$(now_ms)
  port=$(free_port)
  URL="http://127.0.0.1:$port"
  # --launch-layer runtime: the loop's private runtime has no driver beside it, so its launches
  # stay in the runtime; probed there, every call of the mix has one probe pair, as under the
  # empty pair it is compared with (issue #40: the default probes launches in the driver).
  "$BUILD/stallwatch" run --listen "127.0.0.1:$port" --window 1s --detach-linger 600s \
    --launch-layer runtime >>"$WORK/daemon.log" 2>&1 &
  DAEMON_PID=$!
  for ((i = 0; i < 600; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$URL/healthz" || true)
    [[ $code == 200 ]] && break
    alive "$DAEMON_PID" || die "stallwatch exited; see $WORK/daemon.log"
    sleep 0.1
  done
  [[ $code == 200 ]] || die "stallwatch /healthz not 200 after 60 s"
  # Probes go on when a process maps the library: keep one mapping it until they are attached.
  "$CALL_LOOP" "$LIB" --rate 1000 --seconds 60 >/dev/null &
  WARM_PID=$!
  for ((i = 0; i < 300; i++)); do
    probes=$(metric stallwatch_attached_probes)
    ((probes > 0)) && break
    sleep 0.1
  done
  stop_pid "$WARM_PID" 5
  WARM_PID=
  ((probes > 0)) || die "stallwatch attached no probe to $LIB within 30 s"
  DAEMON_PROBES=$probes
  DAEMON_START_MS=$(($(now_ms) - t0))
}

DAEMON_STOP_MS=0
stop_daemon() {
  local t0
  t0=$(now_ms)
  stop_pid "$DAEMON_PID" 120
  DAEMON_PID=
  DAEMON_STOP_MS=$(($(now_ms) - t0))
}

measure() { "$CALL_LOOP" "$LIB" --calls "$CALLS" | jq -r .ns_per_call; }

# Per-process CPU of the daemon: utime+stime in clock ticks (all threads), and the precise
# on-CPU nanoseconds from schedstat summed over its threads.
cpu_ticks() {
  local s f
  s=$(<"/proc/$1/stat")
  s=${s##*) }
  read -ra f <<<"$s"
  echo $((f[11] + f[12]))
}
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# ---------------------------------------------------------------------------------------------
# 1. Per-call cost, interleaved.
pre_foreign=$(pgrep -x stallwatch | wc -l || true)
((pre_foreign == 0)) || log "warning: $pre_foreign other stallwatch process(es) running"
SAMPLES="$WORK/samples.jsonl"
: >"$SAMPLES"
VARIANTS=(untraced empty stallwatch)
EMPTY_PROBES=0
DAEMON_PROBES=0
start_all=$(now_ms)
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < 3; k++)); do
    v=${VARIANTS[(r + k) % 3]}
    setup_ms=0
    teardown_ms=0
    case $v in
      empty)
        t0=$(now_ms)
        start_loader
        setup_ms=$(($(now_ms) - t0))
        EMPTY_PROBES=$(awk '{ print $2 }' "$WORK/loader.out")
        ;;
      stallwatch)
        start_daemon
        setup_ms=$DAEMON_START_MS
        ;;
    esac
    f1=$(foreign_probes)
    ns=$(measure)
    f2=$(foreign_probes)
    case $v in
      empty)
        t0=$(now_ms)
        stop_loader
        teardown_ms=$(($(now_ms) - t0))
        ;;
      stallwatch)
        stop_daemon
        teardown_ms=$DAEMON_STOP_MS
        ;;
    esac
    log "round $r/$ROUNDS $v: $ns ns/call (setup ${setup_ms} ms, teardown ${teardown_ms} ms)"
    printf '{"round":%d,"variant":"%s","ns_per_call":%s,"foreign_probes":%d,"setup_ms":%d,"teardown_ms":%d}\n' \
      "$r" "$v" "$ns" "$((f1 > f2 ? f1 : f2))" "$setup_ms" "$teardown_ms" >>"$SAMPLES"
  done
done
rounds_ms=$(($(now_ms) - start_all))

# ---------------------------------------------------------------------------------------------
# 2. Daemon cost under paced load.
COST="$WORK/cost.jsonl"
: >"$COST"
start_daemon
sleep 2.2 # let the warm-up calls reach /metrics before the first step counts anything
CLK_TCK=$(getconf CLK_TCK)
# One step: the daemon's CPU, RSS and lost events while COMMAND runs (it prints call_loop's JSON
# line; "idle" sleeps IDLE_SECONDS). SCALE is the step's shape: {"threads":T,"processes":P}.
cost_step() { # RATE SCALE_JSON COMMAND...
  local rate=$1 scale=$2 lost0 counted0 t0 n0 w0 load w1 t1 n1 rss hwm lost1 counted1
  shift 2
  lost0=$(metric stallwatch_events_lost_total)
  counted0=$(metric stallwatch_cuda_call_duration_seconds_count)
  t0=$(cpu_ticks "$DAEMON_PID")
  n0=$(cpu_ns "$DAEMON_PID")
  w0=$(date +%s%N)
  if [[ $1 == idle ]]; then
    sleep "$IDLE_SECONDS"
    load='{"calls":0,"rate":0,"target_rate":0}'
  else
    load=$("$@")
  fi
  w1=$(date +%s%N)
  t1=$(cpu_ticks "$DAEMON_PID")
  n1=$(cpu_ns "$DAEMON_PID")
  rss=$(status_kb "$DAEMON_PID" VmRSS)
  hwm=$(status_kb "$DAEMON_PID" VmHWM)
  sleep 2.2 # two 1 s windows: the counters of the last calls reach /metrics
  lost1=$(metric stallwatch_events_lost_total)
  counted1=$(metric stallwatch_cuda_call_duration_seconds_count)
  jq -nc --argjson load "$load" --argjson rate "$rate" --argjson wall_ns "$((w1 - w0))" \
    --argjson ticks "$((t1 - t0))" --argjson tck "$CLK_TCK" --argjson sched_ns "$((n1 - n0))" \
    --argjson rss "$rss" --argjson hwm "$hwm" --argjson lost "$((lost1 - lost0))" \
    --argjson lost_total "$lost1" --argjson counted "$((counted1 - counted0))" \
    --argjson scale "$scale" \
    '{target_rate: $rate, achieved_rate: $load.rate, calls: $load.calls, calls_counted: $counted,
      threads: $scale.threads, processes: $scale.processes,
      seconds: ($wall_ns / 1e9), cpu_ticks: $ticks,
      cpu_percent_stat: ($ticks / $tck / ($wall_ns / 1e9) * 100),
      cpu_percent_schedstat: ($sched_ns / $wall_ns * 100),
      rss_kb: $rss, rss_peak_kb: $hwm, lost_events: $lost, lost_events_total: $lost_total}'
}
# P call_loop processes, each in a cgroup of its own, sharing RATE calls/s; one JSON line.
multi_load() { # P RATE
  local p=$1 rate=$2 i pids=()
  for ((i = 0; i < p; i++)); do
    mkdir -p "$CG2/stallwatch_bench_p$i"
    (
      echo $BASHPID >"$CG2/stallwatch_bench_p$i/cgroup.procs"
      exec "$CALL_LOOP" "$LIB" --rate $((rate / p)) --seconds "$RATE_SECONDS" --threads 1
    ) >"$WORK/multi.$i.json" &
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$WORK"/multi.*.json | jq -sc '{calls: (map(.calls) | add), rate: (map(.rate) | add)}'
  rm -f "$WORK"/multi.*.json
}
# Removed only after cost_step has read the counters: a vanished cgroup's series leave /metrics.
multi_cleanup() { # P
  local i
  for ((i = 0; i < $1; i++)); do rmdir "$CG2/stallwatch_bench_p$i" 2>/dev/null || true; done
}
CG2=$(findmnt -n -t cgroup2 -o TARGET | head -n1)
for rate in 0 $RATES; do
  if ((rate == 0)); then
    cost_step 0 "{\"threads\":0,\"processes\":0}" idle >>"$COST"
  else
    cost_step "$rate" "{\"threads\":$RATE_THREADS,\"processes\":1}" \
      "$CALL_LOOP" "$LIB" --rate "$rate" --seconds "$RATE_SECONDS" --threads "$RATE_THREADS" >>"$COST"
  fi
  log "daemon at $rate calls/s: $(tail -n1 "$COST")"
done
# Scaling at SCALE_RATE calls/s: more threads in one process, then more processes, each in a
# cgroup of its own (more map entries, more series, more work per window).
SCALE="$WORK/scale.jsonl"
: >"$SCALE"
for t in $SCALE_THREADS; do
  cost_step "$SCALE_RATE" "{\"threads\":$t,\"processes\":1}" \
    "$CALL_LOOP" "$LIB" --rate "$SCALE_RATE" --seconds "$RATE_SECONDS" --threads "$t" >>"$SCALE"
  log "daemon at $SCALE_RATE calls/s over $t threads: $(tail -n1 "$SCALE")"
done
for p in $SCALE_PROCESSES; do
  cost_step "$SCALE_RATE" "{\"threads\":$p,\"processes\":$p}" multi_load "$p" "$SCALE_RATE" >>"$SCALE"
  multi_cleanup "$p"
  log "daemon at $SCALE_RATE calls/s over $p processes: $(tail -n1 "$SCALE")"
done

# ---------------------------------------------------------------------------------------------
# 3. BPF program run time per run, from bpf_stats (only now: it slows every program a little).
# {name: {run_time_ns, run_cnt}} summed over the programs our daemon and loader hold. This
# bpftool lists no owner pids: the ids come from the attachments perf show lists (the loader's
# per-probe links) and from the prog_id of the daemon's open program descriptors (its
# multi-uprobe links are not perf events). A *_multi copy (its name cut to 15 characters) counts
# as its program.
prog_stats() {
  local ids fd_ids
  fd_ids=$( (grep -h '^prog_id:' /proc/"${DAEMON_PID:-0}"/fdinfo/* 2>/dev/null || true) |
    awk '{print $2}' | jq -sc '.')
  ids=$(bpftool perf show -j |
    jq -c --argjson mine "[${DAEMON_PID:-0},${LOADER_PID:-0}]" --argjson fds "$fd_ids" \
      '[(.[] | select(.pid | IN($mine[])) | .prog_id), $fds[]] | unique')
  bpftool prog show -j |
    jq -c --argjson ids "$ids" '
      [.[] | select(.id | IN($ids[])) | .name |= sub("_multi?$"; "")]
      | group_by(.name)
      | map({key: .[0].name, value: {run_time_ns: (map(.run_time_ns // 0) | add),
                                     run_cnt: (map(.run_cnt // 0) | add)}})
      | from_entries'
}
HOOKS="$WORK/hooks.jsonl"
: >"$HOOKS"
STATS_WAS=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=1
stat_phase() { # NAME COMMAND...: program run time deltas over the command
  local name=$1 before after out
  shift
  before=$(prog_stats)
  out=$("$@")
  after=$(prog_stats)
  jq -nc --arg phase "$name" --argjson b "$before" --argjson a "$after" --argjson out "$out" \
    '{phase: $phase, load: $out,
      programs: ($a | with_entries(.value as $v | ($b[.key] // {run_time_ns: 0, run_cnt: 0}) as $o
        | .value = {runs: ($v.run_cnt - $o.run_cnt), run_time_ns: ($v.run_time_ns - $o.run_time_ns),
                    ns_per_run: (if $v.run_cnt > $o.run_cnt
                                 then ($v.run_time_ns - $o.run_time_ns) / ($v.run_cnt - $o.run_cnt)
                                 else null end)}))}' >>"$HOOKS"
  log "bpf_stats $name: $(tail -n1 "$HOOKS" | jq -c '.programs | map_values(.ns_per_run)')"
}
# The timer pair (empty_probe --timer): two clock reads and two task-storage lookups per call, the
# floor of any per-thread call timer, measured with the daemon stopped: beside cuda_enter/cuda_exit
# on the same probes, whichever program runs second finds the thread's storage warm.
stop_daemon
start_loader --timer
stat_phase timer_alone "$CALL_LOOP" "$LIB" --calls "$CALLS"
stop_loader
start_daemon
# The empty scheduler programs run beside the daemon's on the same switches: their ns/run is the
# floor (bpf_stats' own clock reads and the dispatch) that sched_switch/sched_wakeup are above.
start_loader --sched
stat_phase pingpong_untraced "$BUILD/bench/pingpong" --seconds "$PINGPONG_SECONDS"
stat_phase pingpong_traced "$BUILD/bench/pingpong" --seconds "$PINGPONG_SECONDS" --lib "$LIB"
stat_phase call_loop "$CALL_LOOP" "$LIB" --calls "$CALLS"
stop_loader
# Host hooks: block_io_start/done under IO_READS O_DIRECT 4 KiB reads by a process of a cgroup
# without CUDA threads (one map lookup, then return), then of a watched one (a call_loop ran
# there first). Reclaim, OOM and retransmit hooks follow the same pattern and fire far less.
IO_FILE="$WORK/io.bin"
dd if=/dev/zero of="$IO_FILE" bs=1M count=64 oflag=direct status=none
io_load() { # CGROUP_DIR [LIB]: joins the cgroup, optionally makes CUDA calls, reads; prints JSON
  (
    echo $BASHPID >"$1/cgroup.procs"
    [[ -n ${2:-} ]] && "$CALL_LOOP" "$2" --calls 1000 >/dev/null
    dd if="$IO_FILE" of=/dev/null bs=4k count="$IO_READS" iflag=direct status=none
  )
  echo "{\"reads\": $IO_READS}"
}
for cg in io_untraced io_traced; do
  rmdir "$CG2/stallwatch_bench_$cg" 2>/dev/null || true
  mkdir "$CG2/stallwatch_bench_$cg"
done
stat_phase io_untraced io_load "$CG2/stallwatch_bench_io_untraced"
stat_phase io_traced io_load "$CG2/stallwatch_bench_io_traced" "$LIB"
rmdir "$CG2/stallwatch_bench_io_untraced" "$CG2/stallwatch_bench_io_traced" 2>/dev/null || true
sysctl -qw kernel.bpf_stats_enabled="$STATS_WAS"
STATS_WAS=
stop_daemon

# ---------------------------------------------------------------------------------------------
# 4. Engine and store (run_engine above); merged into OUT as "engine" once OUT is written.
run_engine

# ---------------------------------------------------------------------------------------------
# 5. Exposition (run_exposition above); merged into OUT as "exposition" once OUT is written.
run_exposition
total_ms=$(($(now_ms) - start_all))

# ---------------------------------------------------------------------------------------------
# Results: one JSON document, then a table from it.
jq -n --slurpfile samples "$SAMPLES" --slurpfile cost "$COST" --slurpfile hooks "$HOOKS" \
  --slurpfile scale "$SCALE" --argjson scale_rate "$SCALE_RATE" \
  --arg date "$(date -u +%FT%TZ)" --arg kernel "$(uname -r)" \
  --arg cpu "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)" \
  --argjson nproc "$(nproc)" --argjson rounds "$ROUNDS" --argjson calls "$CALLS" \
  --arg revision "$(git -C "$ROOT" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)" \
  --argjson empty_probes "$EMPTY_PROBES" --argjson daemon_probes "$DAEMON_PROBES" \
  --argjson rounds_ms "$rounds_ms" --argjson total_ms "$total_ms" \
  --argjson other_daemons "$pre_foreign" '
  def median: sort | if length == 0 then null
                     elif length % 2 == 1 then .[length / 2 | floor]
                     else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  ($samples | map(select(.foreign_probes == 0))) as $clean
  | (if ($clean | length) > 0 then $clean else $samples end) as $use
  | ($use | group_by(.variant) | map({key: .[0].variant, value: (map(.ns_per_call) | median)})
     | from_entries) as $m
  | ($use | group_by(.round)
     | map(select(length == 3) | (map({key: .variant, value: .ns_per_call}) | from_entries)
           | select(.empty > .untraced) | (.stallwatch - .untraced) / (.empty - .untraced)))
     as $paired
  | {date: $date, kernel: $kernel, cpu: $cpu, nproc: $nproc, revision: $revision,
     rounds: $rounds, calls_per_sample: $calls, other_stallwatch_at_start: $other_daemons,
     runtime_s: {rounds: ($rounds_ms / 1000), total: ($total_ms / 1000)},
     call_cost: {
       probes_attached: {empty: $empty_probes, stallwatch: $daemon_probes},
       samples: $samples,
       samples_set_aside_for_foreign_probes: (($samples | length) - ($clean | length)),
       median_ns_per_call: $m,
       added_ns: {empty: ($m.empty - $m.untraced), stallwatch: ($m.stallwatch - $m.untraced)},
       ratio_of_medians: (($m.stallwatch - $m.untraced) / ($m.empty - $m.untraced)),
       ratio_paired: {per_round: $paired, median: ($paired | median)},
       target_ratio: 1.10},
     daemon_cost: {samples: $cost, target_cpu_percent: 1.0, target_rss_kb: 65536,
                   scaling: {rate: $scale_rate, samples: $scale}},
     bpf_run_time: $hooks}
  | .sched_hooks = ([.bpf_run_time[] | select(.phase | startswith("pingpong_"))
      | {key: (.phase | ltrimstr("pingpong_")),
         value: (.programs as $p | {
           switch_ns: $p.sched_switch.ns_per_run, wakeup_ns: $p.sched_wakeup.ns_per_run,
           floor_switch_ns: $p.empty_switch.ns_per_run, floor_wakeup_ns: $p.empty_wakeup.ns_per_run,
           net_switch_ns: ($p.sched_switch.ns_per_run - $p.empty_switch.ns_per_run),
           net_wakeup_ns: ($p.sched_wakeup.ns_per_run - $p.empty_wakeup.ns_per_run)})}]
      | from_entries)
  | .sched_hooks.target_ns = {untraced: 50, traced: 150}
  | (.bpf_run_time | map(select(.phase == "call_loop"))[0].programs) as $p
  | (.bpf_run_time | map(select(.phase == "timer_alone"))[0].programs) as $t
  | .call_cost.bpf_body_ns_per_call = {
      stallwatch: ($p.cuda_enter.ns_per_run + $p.cuda_exit.ns_per_run),
      empty: ($p.empty_enter.ns_per_run + $p.empty_exit.ns_per_run),
      timer_alone: ($t.timer_enter.ns_per_run + $t.timer_exit.ns_per_run)}
  | .call_cost.bpf_body_ns_above_timer =
      (.call_cost.bpf_body_ns_per_call.stallwatch - .call_cost.bpf_body_ns_per_call.timer_alone)
  | .call_cost.ratio_estimate_from_bpf_stats =
      (1 + (.call_cost.bpf_body_ns_per_call.stallwatch - .call_cost.bpf_body_ns_per_call.empty)
             / .call_cost.added_ns.empty)
  | .call_cost.pass = (.call_cost.ratio_of_medians <= 1.10)' >"$OUT"
merge_engine
merge_exposition
log "wrote $OUT"

table() { jq -r "def r(n): if . == null then \"-\" else (. * pow(10; n) | round) / pow(10; n) | tostring end; $1" "$OUT" | column -t -s $'\t'; }
jq -r '"per-call cost: \(.rounds) interleaved rounds x \(.calls_per_sample) calls, medians; \(.kernel), \(.nproc) x \(.cpu)"' "$OUT"
table '"variant\tns/call\tadded ns\tprobes",
  "untraced\t\(.call_cost.median_ns_per_call.untraced | r(1))\t-\t0",
  "empty pair\t\(.call_cost.median_ns_per_call.empty | r(1))\t\(.call_cost.added_ns.empty | r(1))\t\(.call_cost.probes_attached.empty)",
  "stallwatch\t\(.call_cost.median_ns_per_call.stallwatch | r(1))\t\(.call_cost.added_ns.stallwatch | r(1))\t\(.call_cost.probes_attached.stallwatch)"'
table '"ratio (stallwatch-untraced)/(empty-untraced):\t\(.call_cost.ratio_of_medians | r(3))\t(target <= 1.10)",
  "paired per-round ratios, median:\t\(.call_cost.ratio_paired.median | r(3))\t\(.call_cost.ratio_paired.per_round | map(r(2)) | join(" "))",
  "estimate from bpf_stats:\t\(.call_cost.ratio_estimate_from_bpf_stats | r(3))\t(1 + (cuda_enter+cuda_exit - empty pair body ns) / empty added ns)",
  "bpf_stats ns per call, stallwatch / timer pair alone / empty pair:\t\(.call_cost.bpf_body_ns_per_call | "\(.stallwatch | r(0)) / \(.timer_alone | r(0)) / \(.empty | r(0))")\t(stallwatch above the timer: \(.call_cost.bpf_body_ns_above_timer | r(0)) ns; target <= 250 in all)",
  "samples set aside (foreign probes):\t\(.call_cost.samples_set_aside_for_foreign_probes)"'
echo
echo "daemon cost (--window 1s, call_loop over $RATE_THREADS threads)"
table '"calls/s\tachieved\tcalls\tcounted\tCPU % stat\tCPU % schedstat\tRSS MB\tpeak MB\tlost",
  (.daemon_cost.samples[] | "\(.target_rate)\t\(.achieved_rate | r(0))\t\(.calls)\t\(.calls_counted)\t\(.cpu_percent_stat | r(2))\t\(.cpu_percent_schedstat | r(3))\t\(.rss_kb / 1024 | r(1))\t\(.rss_peak_kb / 1024 | r(1))\t\(.lost_events)")'
echo
echo "daemon cost at $SCALE_RATE calls/s by threads and processes (each process in its own cgroup)"
table '"threads\tprocesses\tachieved\tcounted\tCPU % stat\tCPU % schedstat\tRSS MB\tlost",
  (.daemon_cost.scaling.samples[] | "\(.threads)\t\(.processes)\t\(.achieved_rate | r(0))\t\(.calls_counted)\t\(.cpu_percent_stat | r(2))\t\(.cpu_percent_schedstat | r(3))\t\(.rss_kb / 1024 | r(1))\t\(.lost_events)")'
echo
echo "scheduler hooks: ns per run (bpf_stats), the empty programs' floor on the same switches, and the difference"
table '"load\tsched_switch\tfloor\tnet\tsched_wakeup\tfloor\tnet\ttarget (net)",
  (.sched_hooks | to_entries[] | select(.key != "target_ns") | .key as $k
   | "\($k)\t\(.value.switch_ns | r(1))\t\(.value.floor_switch_ns | r(1))\t\(.value.net_switch_ns | r(1))\t\(.value.wakeup_ns | r(1))\t\(.value.floor_wakeup_ns | r(1))\t\(.value.net_wakeup_ns | r(1))\t\(if $k == "untraced" then 50 else 150 end)")'
echo
echo "BPF program run time (bpf_stats; program body only, not the uprobe trap)"
# shellcheck disable=SC2016 # $p is a jq variable
table '"phase\tprogram\truns\tns/run",
  (.bpf_run_time[] | .phase as $p | .programs | to_entries[] | select(.key != "discovery_mmap" and .value.runs >= 1000)
   | "\($p)\t\(.key)\t\(.value.runs)\t\(.value.ns_per_run | r(1))")'
echo
engine_table
echo
exposition_table
echo
table '"total runtime \(.runtime_s.total | r(0)) s (rounds \(.runtime_s.rounds | r(0)) s)"'
