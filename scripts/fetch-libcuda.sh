#!/usr/bin/env bash
# Unpacks NVIDIA's driver library from Debian non-free's libcuda1 into DEST (default
# build/nvidia), never installing it: the privileged tests call its real entry points, which
# run without a GPU and return errors (issue #48). A private apt configuration under a temporary
# directory adds the non-free component; the host's own apt sources and state are not touched.
# DEST/libcuda.so.1 links to the unpacked file. Idempotent: nothing is done when it exists.
# Without network or the package, says so and exits 0: the tests that need it skip with a reason.
set -euo pipefail
dest=${1:-build/nvidia}
if [ -e "$dest/libcuda.so.1" ]; then
  echo "fetch-libcuda: $dest/libcuda.so.1 present"
  exit 0
fi
. /etc/os-release
suite=${VERSION_CODENAME:-bookworm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
echo "deb http://deb.debian.org/debian $suite non-free" > "$tmp/sources.list"
opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o Debug::NoLocking=1
      -o APT::Sandbox::User=root)
if ! apt-get "${opts[@]}" -qq update >"$tmp/log" 2>&1 ||
   ! (cd "$tmp" && apt-get "${opts[@]}" -qq download libcuda1 >>"$tmp/log" 2>&1); then
  echo "fetch-libcuda: warning: could not download libcuda1 from $suite non-free" \
       "(tests on NVIDIA's real driver will skip):" >&2
  tail -n 3 "$tmp/log" >&2
  exit 0
fi
mkdir -p "$dest"
dpkg-deb -x "$tmp"/libcuda1_*.deb "$dest"
real=$(find "$dest/usr/lib" -name 'libcuda.so.*.*' -type f | head -n 1)
if [ -z "$real" ]; then
  echo "fetch-libcuda: warning: libcuda1 holds no libcuda.so.*" >&2
  exit 0
fi
ln -sfn "${real#"$dest"/}" "$dest/libcuda.so.1"
echo "fetch-libcuda: $(basename "$real") unpacked into $dest ($(dpkg-deb -f "$tmp"/libcuda1_*.deb Version))"
