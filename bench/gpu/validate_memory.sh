#!/usr/bin/env bash
# GPU memory, out of memory and CUDA Graph checks (issue #20) against real PyTorch
# (docs/validation.md). Usage (as root): bench/gpu/validate_memory.sh STALLWATCH_BINARY OUTDIR
# Runs bench/gpu/memory_graphs.py twice under one daemon (1 s windows): with the default
# caching allocator (cudaMalloc segments) and with expandable_segments (cuMemCreate handles),
# each in its own cgroup; then saves explain, /metrics and the daemon's log.
set -uo pipefail
SW=${1:?stallwatch binary}; OUT=${2:?output directory}
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=${PORT:-19465}
DB=/tmp/stallwatch-memory/stallwatch.db; rm -rf "${DB%/*}"; mkdir -p "${DB%/*}" "$OUT"
S=$OUT/memory-summary.txt
say() { printf '%s\n' "$*" | tee -a "$S"; }
say "== machine"; { uname -r; nvidia-smi -L; python3 -c 'import torch; print(torch.__version__)'; } 2>&1 | tee -a "$S"
"$SW" run --listen 127.0.0.1:$PORT --db "$DB" --window 1s --kube-api none >"$OUT/memory-daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 150); do curl -sf 127.0.0.1:$PORT/healthz >/dev/null 2>&1 && break
  python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz',timeout=1)" 2>/dev/null && break
  kill -0 $DPID 2>/dev/null || break; sleep 0.2; done
kill -0 $DPID 2>/dev/null || { say "daemon died"; tail -20 "$OUT/memory-daemon.log" | tee -a "$S"; exit 1; }
CG=/sys/fs/cgroup
run_in() {  # name, env..., then the script's arguments
  local name=$1; shift
  mkdir -p "$CG/sw-$name" 2>/dev/null
  ( [[ -d $CG/sw-$name ]] && echo $BASHPID > "$CG/sw-$name/cgroup.procs" 2>/dev/null
    exec env "$@" )
}
say "== caching allocator (cudaMalloc)"
run_in plain PYTHONUNBUFFERED=1 python3 "$HERE/memory_graphs.py" --port $PORT --label plain 2>&1 | tee -a "$S"
say "== expandable_segments (cuMemCreate)"
run_in expandable PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
  python3 "$HERE/memory_graphs.py" --port $PORT --label expandable --recapture 0 --steady 0 2>&1 | tee -a "$S"
sleep 3
curl -s 127.0.0.1:$PORT/metrics > "$OUT/memory-metrics.txt" 2>/dev/null || \
  python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics').read().decode())" > "$OUT/memory-metrics.txt"
kill -TERM $DPID; wait $DPID; say "daemon exit $?"
say "== explain"; "$SW" explain --db "$DB" --since 30m 2>&1 | tee -a "$S"
say "== chains (json)"; "$SW" explain --db "$DB" --since 30m --json > "$OUT/memory-explain.json" 2>&1
say "== memory families"; grep -E '^stallwatch_cuda_memory' "$OUT/memory-metrics.txt" | tee -a "$S"
say "== log"; grep -E 'tracing|warn|error' "$OUT/memory-daemon.log" | head -30 | tee -a "$S"
rmdir "$CG/sw-plain" "$CG/sw-expandable" 2>/dev/null
true
