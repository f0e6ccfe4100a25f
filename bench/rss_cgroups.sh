#!/usr/bin/env bash
# Daemon memory with N busy cgroups (issue #18: RSS <= 64 MB at 256 cgroups in the typical mix).
# Root. Starts `stallwatch run` (5 s windows, store on, --library-dirs over the bench's copy of
# the mock libcudart), puts one call_loop into each of N new kubepods-style container cgroups
# (cgroup v2; 64-hex container ids, like the exposition benchmark's worst case), lets three
# windows pass, scrapes /metrics as Prometheus does (text with gzip, then protobuf with gzip),
# and reports the daemon's RSS and peak RSS (VmHWM), the series and the body sizes as one JSON
# line. call_loop makes 5 runtime calls (launch, memcpy async, stream sync, malloc, free) at
# RATE calls/s per process, waking every 100 ms.
#   sudo N=256 RATE=200 bash bench/rss_cgroups.sh [OUT.json]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD:-build}
N=${N:-256}
RATE=${RATE:-200}
PORT=${PORT:-19481}
OUT=${1:-}
LIB=$B/bench/run/lib/libcudart.so.12
mkdir -p "$(dirname "$LIB")"
cp -n "$B/mock/libcudart.so.12" "$LIB" 2>/dev/null || true
CG2=$(findmnt -n -t cgroup2 -o TARGET | head -n1)
[[ -n $CG2 ]] || { echo "rss_cgroups: no cgroup v2 mount" >&2; exit 1; }
ROOT="$CG2/sw_rss_bench.slice"
DB=$(mktemp -d)/rss.db
pids=()
daemon=
cleanup() {
  [[ ${#pids[@]} -gt 0 ]] && kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  [[ -n $daemon ]] && { kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; }
  find "$ROOT" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  rm -rf "$(dirname "$DB")"
}
trap cleanup EXIT

"$B/stallwatch" run --listen "127.0.0.1:$PORT" --db "$DB" --kube-api none \
  --library-dirs "$PWD/$(dirname "$LIB")" >/tmp/rss_cgroups.log 2>&1 &
daemon=$!
for _ in $(seq 150); do
  curl -sf "127.0.0.1:$PORT/metrics" 2>/dev/null | grep -q '^stallwatch_attached_probes [1-9]' && break
  sleep 0.2
done
hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }
mkdir -p "$ROOT"
for ((i = 0; i < N; i++)); do
  pod="$ROOT/kubepods-burstable-pod$(hex 4)_$(hex 2)_$(hex 2)_$(hex 2)_$(hex 6).slice"
  cg="$pod/cri-containerd-$(hex 32).scope"
  mkdir -p "$cg"
  (echo $BASHPID >"$cg/cgroup.procs"; exec "$B/bench/call_loop" "$LIB" --rate "$RATE" --seconds 600 --threads 1 --tick-ms 100) >/dev/null &
  pids+=($!)
done
# Three 5 s windows with every cgroup busy.
sleep 18
status() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$daemon/status"; }
gz_text=$(curl -s --compressed -o /tmp/rss_text.txt -w '%{size_download}' "127.0.0.1:$PORT/metrics")
accept='application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited'
gz_pb=$(curl -s -H "Accept: $accept" -H 'Accept-Encoding: gzip' -o /tmp/rss_pb.gz -w '%{size_download}' "127.0.0.1:$PORT/metrics")
pb=$(gzip -dc /tmp/rss_pb.gz | wc -c)
text=$(wc -c </tmp/rss_text.txt)
series=$(grep -c '^stallwatch_' /tmp/rss_text.txt || true)
cgroups=$(grep -c '^stallwatch_cgroup_info{' /tmp/rss_text.txt || true)
rss=$(status VmRSS); hwm=$(status VmHWM)
lost=$(grep '^stallwatch_events_lost_total' /tmp/rss_text.txt | awk '{s += $2} END {print s + 0}')
line=$(printf '{"date":"%s","revision":"%s","cgroups":%d,"cgroups_exported":%d,"rate_per_process":%d,"sample_lines":%d,"text_bytes":%d,"text_gzip_bytes":%d,"protobuf_bytes":%d,"protobuf_gzip_bytes":%d,"rss_kb":%d,"peak_rss_kb":%d,"events_lost":%s}' \
  "$(date -u +%FT%TZ)" "$(git rev-parse --short HEAD)" "$N" "$cgroups" "$RATE" "$series" "$text" "$gz_text" "$pb" "$gz_pb" "$rss" "$hwm" "$lost")
echo "$line"
[[ -z $OUT ]] || echo "$line" >"$OUT"
