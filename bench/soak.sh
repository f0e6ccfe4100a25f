#!/usr/bin/env bash
# Soak (issue #15): the real daemon for SOAK_MINUTES (default 30) while short-lived CUDA
# processes (the mock libcudart, one every ~1.8 s: 1,000 in 30 min) run in cgroups that are
# created and removed (5 processes each: 200 cgroups), /metrics is scraped every 5 s and OTLP is
# pushed every 5 s to a loopback sink. Every 30 s it records the daemon's RSS, open fds,
# threads, the live entries of its BPF maps, the store's size and the scrape's size, to
# bench/results/soak-DATE.csv, and prints the first and last samples: all of them should be
# flat (the maps hold only live processes; exited ones are retired every window).
# Needs root (tracing) and a build (make build). Usage: sudo bash bench/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MINUTES=${SOAK_MINUTES:-30}
OUT=${SOAK_OUT:-bench/results/soak-$(date -u +%Y-%m-%d).csv}
BIN=$BUILD/stallwatch
WORKLOAD=$BUILD/mock/cuda_workload
CUDART=$BUILD/mock/libcudart.so.12
[ "$(id -u)" = 0 ] || { echo "soak: run as root (the daemon traces)" >&2; exit 77; }
for f in "$BIN" "$WORKLOAD" "$CUDART"; do
  [ -e "$f" ] || { echo "soak: $f is missing; run make build" >&2; exit 1; }
done

work=$(mktemp -d /tmp/stallwatch-soak.XXXXXX)
cg2=$(findmnt -t cgroup2 -n -o TARGET | head -1)
[ -n "$cg2" ] || { echo "soak: no cgroup2 mount" >&2; exit 1; }
cgroot=$cg2/sw-soak-$$
mkdir -p "$cgroot"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for d in "$cgroot"/*/; do [ -d "$d" ] && rmdir "$d" 2>/dev/null || true; done
  rmdir "$cgroot" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metrics_port=$(free_port)
otlp_port=$(free_port)

# OTLP sink: answers every POST with 200 and an empty body (an empty Export*ServiceResponse).
python3 - "$otlp_port" > "$work/sink.log" 2>&1 <<'EOF' &
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
EOF
pids+=($!)

"$BIN" run --listen "127.0.0.1:$metrics_port" --db "$work/soak.db" --window 1s \
  --otlp-endpoint "http://127.0.0.1:$otlp_port" --otlp-interval 5s > "$work/daemon.log" 2>&1 &
daemon=$!
pids+=($daemon)
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$metrics_port/healthz" > /dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { cat "$work/daemon.log" >&2; exit 1; }
  sleep 0.1
done
curl -sf "http://127.0.0.1:$metrics_port/healthz" > /dev/null || { echo "soak: daemon not ready" >&2; exit 1; }

# Scrapes every 5 s, with the size of the last one kept for the samples.
( while kill -0 "$daemon" 2>/dev/null; do
    curl -s --compressed "http://127.0.0.1:$metrics_port/metrics" -o "$work/scrape.txt" || true
    sleep 5
  done ) &
pids+=($!)

# Workloads: one process every ~1.8 s, five per cgroup, then the cgroup goes.
( i=0
  while kill -0 "$daemon" 2>/dev/null; do
    cg="$cgroot/w$((i / 5))"
    mkdir -p "$cg"
    ( echo $BASHPID > "$cg/cgroup.procs"
      exec "$WORKLOAD" --cudart "$CUDART" --start-delay-ms 200 \
        --calls cudaMemset:20,cudaStreamSynchronize:5,cudaLaunchKernel:50 ) > /dev/null 2>&1 || true
    if [ $((i % 5)) = 4 ]; then rmdir "$cg" 2>/dev/null || true; fi
    i=$((i + 1))
    echo "$i" > "$work/processes"
    sleep 1.6
  done ) &
pids+=($!)

map_entries() {  # live entries of the daemon's map NAME (bpftool shows 15 characters)
  local id
  id=$(bpftool map show -j 2>/dev/null | python3 -c '
import json, sys
name = sys.argv[1][:15]
ids = [m["id"] for m in json.load(sys.stdin) if m.get("name") == name]
print(ids[-1] if ids else "")' "$1")
  [ -n "$id" ] || { echo -1; return; }
  bpftool map dump id "$id" -j 2>/dev/null | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))'
}

mkdir -p "$(dirname "$OUT")"
echo "minute,processes,rss_kib,fds,threads,call_map,offcpu_map,preemptors_map,db_kib,scrape_kib" > "$OUT"
start=$(date +%s)
end=$((start + MINUTES * 60))
while :; do
  now=$(date +%s)
  kill -0 "$daemon" 2>/dev/null || { echo "soak: the daemon died" >&2; tail -20 "$work/daemon.log" >&2; exit 1; }
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$daemon/status")
  fds=$(ls "/proc/$daemon/fd" | wc -l)
  threads=$(awk '/^Threads:/ {print $2}' "/proc/$daemon/status")
  db=$(( ($(stat -c %s "$work/soak.db" 2>/dev/null || echo 0) + $(stat -c %s "$work/soak.db-wal" 2>/dev/null || echo 0)) / 1024 ))
  scrape=$(( $(stat -c %s "$work/scrape.txt" 2>/dev/null || echo 0) / 1024 ))
  line="$(awk -v s=$((now - start)) 'BEGIN {printf "%.1f", s / 60}'),$(cat "$work/processes" 2>/dev/null || echo 0),$rss,$fds,$threads,$(map_entries call_index),$(map_entries offcpu),$(map_entries preemptors),$db,$scrape"
  echo "$line" >> "$OUT"
  echo "soak: $line"
  [ "$now" -ge "$end" ] && break
  sleep 30
done
lost=$(curl -s "http://127.0.0.1:$metrics_port/metrics" | grep '^stallwatch_events_lost_total' | awk '{s += $2} END {print s + 0}')
echo "soak: $(tail -1 "$OUT" | cut -d, -f2) processes in $MINUTES min; events lost: $lost; samples in $OUT"
echo "soak: first $(sed -n 2p "$OUT")"
echo "soak: last  $(tail -1 "$OUT")"
