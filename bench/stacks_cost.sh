#!/usr/bin/env bash
# Kernel time of call-site capture (issue #17), from bpf_stats: cuda_exit's ns per run with
# --stacks=on against --stacks=off, in one run on this machine, for
#   native    every call an outlier (1.5 ms), a C caller with frame pointers (tests/mock/stack_app)
#   python32  every call an outlier, from a Python function 32 frames deep (pyenv 3.12)
#   fast      no call an outlier (the threshold is never reached): must cost the same on and off
# Usage (as root, after a build): bench/stacks_cost.sh [BUILD_DIR] > result.json
set -euo pipefail
BUILD=${1:-build}
SW=$BUILD/stallwatch; APP=$BUILD/mock/stack_app; LIB=$BUILD/mock/libcudart.so.12
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-$(ls -d "${PYENV_ROOT:-/root/.pyenv}"/versions/3.12.*/bin/python3 2>/dev/null | tail -1)}
[[ -x $PY ]] || PY=python3
DEEP=$(mktemp /tmp/stallwatch-deep-XXXXXX.py)
cat >"$DEEP" <<'PYEOF'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
def deep(n, calls):
    if n:
        return deep(n - 1, calls)
    for _ in range(calls):
        lib.cudaStreamSynchronize(None)
deep(30, int(sys.argv[2]))  # 30 + <module> + deep's own frame: 32 Python frames
PYEOF
STATS_WAS=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() { sysctl -qw kernel.bpf_stats_enabled="$STATS_WAS"; [[ -n ${D:-} ]] && kill "$D" 2>/dev/null; rm -f "$DEEP"; }
trap cleanup EXIT
sysctl -qw kernel.bpf_stats_enabled=1
exit_ns() {  # DAEMON_PID BEFORE_JSON: cuda_exit ns/run since BEFORE
  python3 "$HERE/gpu/prog_stats.py" "$1" "$2" | awk '/cuda_exit/ {print $(NF-1)}'
}
measure() {  # STACKS WORKLOAD...
  local stacks=$1; shift
  "$SW" run --listen 127.0.0.1:19477 --db none --stacks "$stacks" --kube-api none >/tmp/stacks-cost.log 2>&1 &
  D=$!
  for _ in $(seq 100); do curl -sf 127.0.0.1:19477/healthz >/dev/null 2>&1 && break; sleep 0.1; done
  python3 "$HERE/gpu/prog_stats.py" "$D" >/tmp/stacks-before.json
  "$@" >/dev/null 2>&1 || true
  sleep 1
  exit_ns "$D" /tmp/stacks-before.json
  kill "$D"; wait "$D" 2>/dev/null || true; D=
}
out="{\"machine\": \"$(uname -r), $(nproc) CPUs\", \"date\": \"$(date -u +%F)\""
for w in native python32 fast; do
  for stacks in off on; do
    case $w in
      native) r=$(MOCK_CUDA_SYNC_SLEEP_US=1500 measure $stacks timeout 5 "$APP" "$LIB" 1000) ;;
      python32) r=$(MOCK_CUDA_SYNC_SLEEP_US=1500 measure $stacks "$PY" "$DEEP" "$LIB" 1000) ;;
      fast) r=$(measure $stacks "$PY" "$DEEP" "$LIB" 200000) ;;
    esac
    out+=", \"${w}_${stacks}_ns\": ${r:-null}"
  done
done
echo "$out}"
