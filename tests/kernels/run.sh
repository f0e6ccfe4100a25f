#!/usr/bin/env bash
# make test-kernels (issue #38): boots each kernel of the matrix in qemu and runs, as root in the
# guest, what a kernel can break (BPF programs the verifier must accept, uprobes, task storage,
# iterators, tp_btf, ring buffers): `stallwatch check`, the daemon against the stand-in CUDA job
# with exact call counts, off-CPU time joined to a synchronize under a pinned hog and the
# cpu_contention chain it opens (in /metrics and the store), a cgroup v2 cpu.max limit and the
# cpu_throttle chain it opens (the host may be hybrid; the guest is pure v2), Python frames of
# pyenv's CPython:
# tests/kernels/guest.sh. The guest's root file system is this host's own tree, shared
# read-only over 9p with a tmpfs overlay on top, so the binaries under test are the ones built
# here and nothing is installed in the guest.
#
# The matrix: Debian 12's 6.1 and bookworm-backports' 6.12 (the newest of each in the package
# lists; their .deb files are downloaded with apt-get and unpacked into the cache, never
# installed), and the running kernel, on which `make test` already ran everything.
# KVM when /dev/kvm works, TCG (emulation, several times slower) otherwise. Each guest is bounded
# by STALLWATCH_KERNEL_TIMEOUT seconds (default 1500). Prints one line per kernel and step;
# exit 0 only when every step passed on every kernel.
#
# Environment: BUILD_DIR (default build), STALLWATCH_KERNELS (package names, space separated),
# STALLWATCH_KERNEL_CACHE (default /var/cache/stallwatch-kernels), STALLWATCH_KERNEL_ACCEL
# (kvm or tcg: skip the probe), STALLWATCH_KERNEL_TIMEOUT.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${BUILD_DIR:-$root/build}" && pwd)
cache=${STALLWATCH_KERNEL_CACHE:-/var/cache/stallwatch-kernels}
limit=${STALLWATCH_KERNEL_TIMEOUT:-1500}

fail() { echo "test-kernels: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "test-kernels: skipped: needs root (qemu's 9p export of /, apt-get)"; exit 77; }
for tool in qemu-system-x86_64 busybox xz strings; do
  command -v "$tool" >/dev/null || fail "$tool is missing: bash scripts/install-deps.sh"
done
for f in stallwatch mock/cuda_workload mock/libcudart.so.12 mock/libcuda.so.1; do
  [ -x "$build/$f" ] || fail "$build/$f is missing: build first (make build)"
done

newest() {  # newest package whose name matches the regex
  apt-cache search --names-only "$1" | awk '{print $1}' | sort -V | tail -1
}
if [ -n "${STALLWATCH_KERNELS:-}" ]; then
  read -r -a kernels <<<"$STALLWATCH_KERNELS"
else
  kernels=("$(newest '^linux-image-6\.1\.0-[0-9]+-amd64$')" "$(newest '^linux-image-6\.12\.[0-9]+\+deb12-amd64$')")
fi

# TCG unless told otherwise: on the development VM (itself a guest) /dev/kvm opens, but a
# nested guest does not run. With -cpu host qemu aborts ("failed to set MSR 0x10a": the
# hypervisor refuses IA32_ARCH_CAPABILITIES); with that feature off, or -cpu kvm64, the guest
# stops right after the kernel's decompressor and prints nothing more. STALLWATCH_KERNEL_ACCEL=kvm
# tries KVM where nested virtualization works.
accel=${STALLWATCH_KERNEL_ACCEL:-tcg}
cpu=max
[ "$accel" = kvm ] && cpu=host,-arch-capabilities

# The modules a guest loads, dependencies first (from each module's own .modinfo "depends=").
module_order() {  # module_order MODDIR NAME...
  local dir=$1
  shift
  declare -gA seen=()
  order=()
  visit() {
    local name=$1 file deps
    [ -n "${seen[$name]:-}" ] && return
    seen[$name]=1
    file=$(find "$dir" -name "$name.ko" -o -name "$name.ko.xz" -o -name "$name.ko.zst" | head -1)
    [ -n "$file" ] || return 0  # built in
    case "$file" in
      *.xz) xz -dc "$file" > "$stage/modules/$name.ko" ;;
      *.zst) zstd -qdc "$file" > "$stage/modules/$name.ko" ;;
      *) cp "$file" "$stage/modules/$name.ko" ;;
    esac
    deps=$(strings -a "$stage/modules/$name.ko" | sed -n 's/^depends=//p' | head -1 | tr ',' ' ')
    for d in $deps; do visit "${d//-/_}"; done
    order+=("$name.ko")
  }
  for m in "$@"; do visit "$m"; done
  printf '%s\n' "${order[@]}"
}

status=0
summary=()
work=$(mktemp -d /tmp/stallwatch-kernels.XXXXXX)
[ -n "${STALLWATCH_KERNEL_KEEP:-}" ] && echo "test-kernels: keeping $work" || trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"
# The build directory and pyenv's interpreters are also shared on their own, mounted over their
# paths in the guest: a file mapped from an overlay shows the lower file system's device in
# /proc/PID/maps and the overlay's to stat(), which discovery rightly refuses as "not the file
# the process maps" (with the 9p lower and a tmpfs upper the overlay cannot report one device).
pyenv=${PYENV_ROOT:-/root/.pyenv}
[ -d "$pyenv" ] || pyenv=$work
for pkg in "${kernels[@]}"; do
  [ -n "$pkg" ] || fail "no kernel package found in the package lists (apt-get update?)"
  deb=$(ls "$cache/${pkg}"_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    echo "test-kernels: downloading $pkg"
    (cd "$cache" && apt-get download -q "$pkg" >/dev/null 2>&1) || fail "apt-get download $pkg failed"
    deb=$(ls "$cache/${pkg}"_*.deb | head -1)
  fi
  tree="$cache/x/$pkg"
  [ -d "$tree/boot" ] || { mkdir -p "$tree" && dpkg-deb -x "$deb" "$tree"; }
  version=$(ls "$tree/lib/modules" | head -1)
  vmlinuz="$tree/boot/vmlinuz-$version"
  stage="$work/$version/initrd"
  results="$work/$version/results"
  mkdir -p "$stage/modules" "$stage/bin" "$results"
  cp "$(command -v busybox)" "$stage/bin/busybox"
  cp "$root/tests/kernels/init" "$stage/init"
  module_order "$tree/lib/modules/$version" virtio_pci 9pnet_virtio 9p overlay > "$stage/modules.order"
  (cd "$stage" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) > "$work/$version/initrd.gz"
  # A guest kernel that panics in its own code (seen once in 6.12 under TCG: an int3 left by
  # the kernel's own text patching, in update_curr, while cgroup CPU bandwidth was switched on)
  # is booted once more, saying so; a second panic, or any other failure, fails the run.
  for attempt in 1 2; do
  rm -rf "$results" && mkdir -p "$results"
  note=""
  [ "$attempt" = 1 ] || note=", after a guest panic"
  echo "test-kernels: $version ($accel): booting${note:+ again}"
  t0=$SECONDS
  set +e
  timeout -k 10 "$limit" qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -smp 2 -m 3072 \
    -kernel "$vmlinuz" -initrd "$work/$version/initrd.gz" \
    -append "console=ttyS0 panic=-1 quiet loglevel=4 sw.script=$root/tests/kernels/guest.sh sw.build=$build sw.pyenv=$pyenv" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$results,mount_tag=results,security_model=none" \
    -virtfs "local,path=$build,mount_tag=build,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$pyenv,mount_tag=pyenv,security_model=none,readonly=on,multidevs=remap" \
    -nographic -no-reboot -nic none > "$work/$version/console.log" 2>&1
  qrc=$?
  set -e
  took=$((SECONDS - t0))
  grep 'stallwatch-kernel-test' "$work/$version/console.log" | sed "s/^/  [$version] /" || true
  if [ ! -s "$results/summary" ] || ! grep -qx done "$results/summary"; then
    echo "test-kernels: $version: the guest did not finish (qemu rc $qrc after ${took} s); console:" >&2
    tail -40 "$work/$version/console.log" >&2
    if [ "$attempt" = 1 ] && grep -q 'Kernel panic - not syncing' "$work/$version/console.log"; then
      echo "test-kernels: $version: the guest kernel panicked (above): booting it once more" >&2
      continue
    fi
    summary+=("$version ($accel, ${took} s$note): did not finish")
    status=1
    continue 2
  fi
  break
  done
  line="$version ($accel, ${took} s$note):"
  while read -r name rc secs; do
    [ "$name" = kernel ] || [ "$name" = done ] && continue
    if [ "$rc" = 0 ]; then
      line+=" $name ok (${secs} s)"
    else
      line+=" $name FAIL rc=$rc"
      status=1
      echo "---- $version: $name (rc $rc) ----" >&2
      tail -60 "$results/$name.log" >&2
    fi
  done < "$results/summary"
  summary+=("$line")
  # The check lines, for the per-kernel table of docs/development.md.
  sed -n 's/^\(ok\|warn\|FAIL\) *\([a-z_]*\) .*/    \1 \2/p' "$results/check.log" | tr '\n' ' ' |
    sed "s/^/  [$version] check:/"; echo
done
echo "test-kernels: running kernel $(uname -r): covered by make test"
printf 'test-kernels: %s\n' "${summary[@]}"
exit "$status"
