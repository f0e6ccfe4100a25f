#!/usr/bin/env bash
# Packs what a GPU host needs to run bench/gpu/*.sh without a compiler: the daemon,
# bench/empty_probe, bench/call_loop, the mock runtime and driver, and every shared library they
# load that is not the C library's own (a GPU host's distribution may lack libbpf 1.1,
# libmicrohttpd, Boost's program_options...), into DIR (default gpu-carry, ignored by git).
# DIR/stallwatch, DIR/empty_probe and DIR/call_loop are wrappers that run the binaries in
# DIR/real with DIR/lib on their library path, and on nobody else's: the job under test (python3
# with torch) keeps the host's own libstdc++, libz and libssl.
#   bash bench/gpu/pack.sh [DIR]          # after a build (make build, plus the bench targets)
# Then, on the device machine: bash bench/gpu/wave3.sh DIR "$OUT"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
DIR=${1:-$ROOT/gpu-carry}
die() { echo "pack: $*" >&2; exit 1; }
cmake --build "$BUILD" --target stallwatch empty_probe call_loop mock_cudart_mock mock_cuda_mock \
  -j "${JOBS:-2}" >/dev/null || die "the build failed (cmake --build $BUILD)"
rm -rf "$DIR"
mkdir -p "$DIR/lib" "$DIR/real"
bins=("$BUILD/stallwatch" "$BUILD/bench/empty_probe" "$BUILD/bench/call_loop")
cp "${bins[@]}" "$DIR/real/"
cp "$BUILD/mock/libcudart.so.12" "$BUILD/mock/libcuda.so.1" "$DIR/"
for b in "${bins[@]}"; do
  name=${b##*/}
  # Without debug information (the daemon is over 100 MB with it): the device carries 64 MiB.
  strip --strip-debug "$DIR/real/$name"
  cat > "$DIR/$name" <<'SH'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/real/${0##*/}" "$@"
SH
  chmod 755 "$DIR/$name"
done
# Libraries by the path the loader resolved here (libstdc++ included: a host's may be older than
# the one these were built with); the C library and its loader stay the host's, as they must
# match each other.
for b in "${bins[@]}"; do
  ldd "$b" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
  case ${lib##*/} in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | ld-linux*) continue ;;
  esac
  cp -L "$lib" "$DIR/lib/"
done
echo "pack: $(find "$DIR" -type f | wc -l) files, $(du -sh "$DIR" | cut -f1) in $DIR"
