#!/bin/bash
# PID 1 of a `make test-kernels` guest (tests/kernels/run.sh): the host's own tree, read-only
# under a tmpfs overlay, booted on another kernel, under emulation (everything is several times
# slower than on the host, so every wait here is on a signal, bounded generously, never a sleep).
# Mounts what the daemon needs and runs, as root, each step of issue #38's list (and #36's v2 CPU
# limit) against the binaries built on the host; one line per step ("NAME RC SECONDS") in the
# results directory, each step's output in NAME.log; then powers the guest off. sw.build=DIR on
# the kernel command line names the build directory.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
out=/mnt/stallwatch-results
mount -t proc proc /proc
mount -t sysfs sysfs /sys
build=$(sed -n 's/.*sw\.build=\([^ ]*\).*/\1/p' /proc/cmdline)
repo=$(cd "$(dirname "$0")/../.." && pwd)
# Not /tmp: the overlay already makes it writable, and a checkout under /tmp (a CI clone) is
# mounted there from 9p by init.
for d in /run /dev/shm; do mkdir -p "$d"; mount -t tmpfs tmpfs "$d"; done
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ip link set lo up
ulimit -l unlimited
echo "+cpu +memory +io +pids" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
echo "kernel $(uname -r)" > "$out/summary"

step() {  # step NAME LIMIT_S FUNCTION: its output in NAME.log, "NAME RC SECONDS" in summary
  local name=$1 limit=$2 fn=$3 t0=$SECONDS rc
  echo "stallwatch-kernel-test: $name"
  ( set -e; "$fn" ) > "$out/$name.log" 2>&1 &
  local pid=$!
  ( sleep "$limit"; kill -TERM "$pid" 2>/dev/null ) &
  local guard=$!
  wait "$pid"
  rc=$?
  kill "$guard" 2>/dev/null
  echo "$name $rc $((SECONDS - t0))" >> "$out/summary"
  echo "stallwatch-kernel-test: $name rc=$rc ($((SECONDS - t0)) s)"
}
fail() { echo "FAIL: $*"; exit 1; }
# until LIMIT_S CMD...: runs CMD every 0.5 s until it succeeds; false after LIMIT_S.
until_ok() {
  local limit=$1 t0=$SECONDS
  shift
  until "$@"; do
    [ $((SECONDS - t0)) -lt "$limit" ] || return 1
    sleep 0.5
  done
}
scrape() { curl -s --max-time 20 http://127.0.0.1:9464/metrics; }
# sum NAME [LABEL=VALUE...]: the sum of the samples of NAME carrying those labels.
sum() {
  local name=$1 lines
  shift
  lines=$(scrape | grep -E "^${name}[{ ]" || true)
  for l in "$@"; do lines=$(printf '%s\n' "$lines" | grep -F "${l%%=*}=\"${l#*=}\"" || true); done
  printf '%s\n' "$lines" | awk 'NF { s += $NF } END { printf "%.6f\n", s }'
}
at_least() { awk -v a="$(sum "${@:2}")" -v b="$1" 'BEGIN { exit !(a >= b) }'; }
# windows N: waits until the daemon has published N more windows.
windows() {
  local from
  from=$(sum stallwatch_snapshot_sequence)
  until_ok 300 at_least "$(awk -v f="$from" -v n="$1" 'BEGIN { print f + n }')" stallwatch_snapshot_sequence
}

cd "$build" || { echo "no build dir $build" >> "$out/summary"; echo o > /proc/sysrq-trigger; }
mock=$build/mock

check() { ./stallwatch check; }

daemon_pid=
start_daemon() {
  # On CPU 1: the off-CPU step pins its job and hog to CPU 0, and under emulation the daemon
  # itself would be a preemptor there worth naming.
  taskset -c 1 ./stallwatch run --listen 127.0.0.1:9464 --db /tmp/sw.db --window 1s --log.level debug --hang-threshold 5s \
    --metrics.identity-labels cgroup --metrics.calls call > "$out/daemon-run.log" 2>&1 &
  daemon_pid=$!
  echo "$daemon_pid" > /tmp/daemon.pid
  until_ok 300 curl -sf --max-time 5 http://127.0.0.1:9464/healthz > /dev/null ||
    { cat "$out/daemon-run.log"; fail "not ready"; }
  grep -E "warn|error|ready|probe sites:" "$out/daemon-run.log" | grep -v "debug:" || true
  until_ok 60 at_least 1 stallwatch_snapshot_sequence || fail "no window"
  scrape | grep '^stallwatch_bpf_programs_loaded' | tee "$out/programs.txt"
  ! grep -q ' 0$' "$out/programs.txt" || echo "some programs are not loaded (above)"
}

# In its own cgroup, the stand-in job makes a known number of calls, only once the daemon
# traces it (the job says it has loaded the libraries; the daemon counts it as traced).
exact_counts() {
  mkdir -p /sys/fs/cgroup/sw-exact
  rm -f /tmp/ready /tmp/go
  mkfifo /tmp/ready /tmp/go
  (echo "$BASHPID" > /sys/fs/cgroup/sw-exact/cgroup.procs
   exec "$mock/cuda_workload" --cudart "$mock/libcudart.so.12" --cuda "$mock/libcuda.so.1" \
     --threads 2 --iterations 3 --ready-fd 3 --go-fd 4 \
     --calls cudaMalloc:2,cudaLaunchKernel:50,cudaStreamSynchronize:10,cudaFree:2,cuLaunchKernel:7 \
     3>/tmp/ready 4</tmp/go) &
  local job=$!
  exec 5</tmp/ready 6>/tmp/go
  read -r -n1 -t 300 -u 5 _ || fail "the job never loaded its libraries"
  until_ok 60 at_least 1 stallwatch_traced_processes || fail "the job is never traced"
  printf g >&6
  wait "$job" || fail "the job failed"
  windows 3
  for want in cudaMalloc:12 cudaStreamSynchronize:60 cudaFree:12 cuLaunchKernel:342; do
    got=$(sum stallwatch_cuda_call_duration_seconds_count cgroup=/sw-exact call="${want%%:*}")
    echo "${want%%:*}: $got (want ${want#*:})"
    awk -v a="$got" -v b="${want#*:}" 'BEGIN { exit !(a == b) }' || fail "${want%%:*}: $got"
  done
}

# A spinning synchronize pinned to CPU 0 with a hog pinned there too: the wait inside the call
# is runnable off-CPU time joined to cudaStreamSynchronize, and a cpu_contention chain opens,
# in /metrics and in the store.
offcpu_and_chain() {
  mkdir -p /sys/fs/cgroup/sw-sync /sys/fs/cgroup/sw-hog
  (echo "$BASHPID" > /sys/fs/cgroup/sw-hog/cgroup.procs; exec taskset -c 0 sh -c 'while :; do :; done') &
  local hog=$!
  (echo "$BASHPID" > /sys/fs/cgroup/sw-sync/cgroup.procs
   export MOCK_CUDA_SYNC_CPU_US=2000
   exec taskset -c 0 "$mock/cuda_workload" --cudart "$mock/libcudart.so.12" \
     --iterations 1000000 --calls cudaStreamSynchronize:1) &
  local job=$!
  until_ok 600 at_least 1 stallwatch_chains_total cgroup=/sw-sync kind=cpu_contention ||
    { kill "$hog" "$job"; fail "no cpu_contention chain"; }
  local runnable
  runnable=$(sum stallwatch_cuda_call_offcpu_seconds_total cgroup=/sw-sync call=cudaStreamSynchronize state=runnable)
  echo "runnable inside cudaStreamSynchronize: $runnable s"
  kill "$hog" "$job"
  wait "$hog" "$job" 2>/dev/null || true
  awk -v a="$runnable" 'BEGIN { exit !(a > 0) }' || fail "no runnable time inside the call"
  windows 2
  ./stallwatch explain --db /tmp/sw.db --since 1h --cgroup /sw-sync | tee /tmp/explain.txt | head -30
  grep -q "cpu_contention" /tmp/explain.txt || fail "the store has no chain"
  grep -q "PID $hog[ )]" /tmp/explain.txt || fail "the hog (PID $hog) is not named"
}

# Pure cgroup v2 (the development host is hybrid: its cpu controller is on v1): the job alone on
# CPU 0 in a cgroup whose cpu.max is 30 ms per 100 ms. The kernel throttles it, and the chain is
# cpu_throttle naming cpu.max, with the cgroup's throttled time on /metrics, not cpu_contention.
cpu_limit_v2() {
  local cg=/sys/fs/cgroup/sw-limit
  # This step's own polling (curl, grep, awk every half second) stays off the job's core: on
  # core 0 it preempts the throttled job for real, and cpu_contention rightly names it.
  taskset -pc 1 "$BASHPID" > /dev/null
  mkdir -p "$cg"
  echo "30000 100000" > "$cg/cpu.max"
  (echo "$BASHPID" > "$cg/cgroup.procs"
   export MOCK_CUDA_SYNC_CPU_US=2000
   exec taskset -c 0 "$mock/cuda_workload" --cudart "$mock/libcudart.so.12" \
     --iterations 1000000 --calls cudaStreamSynchronize:1) &
  local job=$!
  until_ok 600 at_least 1 stallwatch_chains_total cgroup=/sw-limit kind=cpu_throttle ||
    { kill "$job"; grep nr_throttled "$cg/cpu.stat"; fail "no cpu_throttle chain"; }
  local throttled limit contention
  throttled=$(sum stallwatch_cgroup_cpu_throttled_seconds_total cgroup=/sw-limit)
  limit=$(sum stallwatch_cgroup_cpu_limit_cores cgroup=/sw-limit)
  contention=$(sum stallwatch_chains_total cgroup=/sw-limit kind=cpu_contention)
  kill "$job"
  wait "$job" 2>/dev/null || true
  grep -E "nr_periods|nr_throttled|throttled_usec" "$cg/cpu.stat"
  echo "throttled: $throttled s; limit: $limit CPUs; cpu_contention chains: $contention"
  awk -v a="$throttled" 'BEGIN { exit !(a > 0) }' || fail "no throttled time on /metrics"
  awk -v a="$limit" 'BEGIN { exit !(a > 0.299 && a < 0.301) }' || fail "limit $limit, want 0.3"
  if ! awk -v a="$contention" 'BEGIN { exit !(a == 0) }'; then
    ./stallwatch explain --db /tmp/sw.db --since 1h --cgroup /sw-limit | head -60
    fail "a cpu_contention chain too"
  fi
  windows 2
  ./stallwatch explain --db /tmp/sw.db --since 1h --cgroup /sw-limit | tee /tmp/explain-limit.txt | head -30
  grep -q "cpu_throttle" /tmp/explain-limit.txt || fail "the store has no cpu_throttle chain"
  grep -q "cpu.max 30000 100000 at" /tmp/explain-limit.txt || fail "the limit is not named"
}

# pyenv's newest CPython 3.12 calls the stand-in runtime through ctypes from known lines; its
# slow synchronizes carry Python frames.
python_frames() {
  local py
  py=$(ls -d /root/.pyenv/versions/3.12.*/bin/python3 2>/dev/null | sort -V | tail -1)
  [ -n "$py" ] || { echo "SKIP: no pyenv CPython 3.12"; return 0; }
  local script=$repo/tests/fixtures/stacks/train_sites.py
  mkdir -p /sys/fs/cgroup/sw-py
  (echo "$BASHPID" > /sys/fs/cgroup/sw-py/cgroup.procs
   export MOCK_CUDA_SYNC_SLEEP_US=3000 MOCK_CUDA_SYNC_CPU_US=0
   exec "$py" "$script" "$mock/libcudart.so.12" 600) &
  local job=$!
  local found=1
  for _ in $(seq 1 120); do
    ./stallwatch stacks --db /tmp/sw.db --since 1h --pid "$job" > /tmp/stacks.txt 2>&1 || true
    if grep -q "settle() at .*train_sites.py" /tmp/stacks.txt; then found=0; break; fi
    sleep 2
  done
  kill "$job"
  wait "$job" 2>/dev/null || true
  head -20 /tmp/stacks.txt
  [ "$found" = 0 ] || fail "no Python frame named settle()"
}

step check 300 check
step daemon 600 start_daemon
if [ -n "$daemon_pid" ] || [ -s /tmp/daemon.pid ]; then
  step exact_counts 900 exact_counts
  step offcpu_chain 900 offcpu_and_chain
  step cpu_limit_v2 900 cpu_limit_v2
  step python_frames 900 python_frames
  kill -TERM "$(cat /tmp/daemon.pid)" 2>/dev/null
fi
echo "done" >> "$out/summary"
sync
echo o > /proc/sysrq-trigger
sleep 30
