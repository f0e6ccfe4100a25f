#!/usr/bin/env bash
# packaging.chroot: the image's runtime stage without a container runtime (this machine cannot
# pull base images). A minimal Debian bookworm root file system made by mmdebstrap from the
# archive (cached as PKG_DIR/bookworm-rootfs.tar, with apt's downloaded packages in
# PKG_DIR/apt-archives, so later runs take seconds), the .deb of packaging.deb installed with
# apt alone (dependencies resolved by apt), and in a chroot: `stallwatch version` prints the
# package's version, `stallwatch demo incident --fast` tells the incident (exit 0),
# `stallwatch check --json` with the host's /proc, /sys and BTF bind-mounted says tracing is
# possible (exit 0, "ok":true), the unit is installed and not enabled.
# Needs root (chroot, mounts) and the Debian mirror; exits 77 (skipped) saying why without.
# Usage: chroot_test.sh BUILD_DIR PKG_DIR
set -euo pipefail
build=$1
out=$2
fail() { echo "packaging.chroot: $*" >&2; exit 1; }
skip() { echo "packaging.chroot: skipped: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for chroot and bind mounts"
command -v mmdebstrap > /dev/null || fail "mmdebstrap is missing: run bash scripts/install-deps.sh"
debs=("$out"/deb/stallwatch_*.deb)
[ -f "${debs[0]}" ] || fail "no .deb in $out/deb: packaging.deb makes it"
deb=${debs[0]}
version=$(dpkg-deb -f "$deb" Version)

# The host's apt settings (mirror quirks such as Check-Valid-Until) go to mmdebstrap as-is.
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}
cache="$out/bookworm-rootfs.tar"
archives="$out/apt-archives"
mkdir -p "$archives/partial"
rm -rf "$cache.tmp"  # a directory left by an earlier version of this test
if [ ! -f "$cache" ] || [ -n "$(find "$cache" -mtime +7 2>/dev/null)" ]; then
  aptopts=()
  for f in /etc/apt/apt.conf.d/*; do [ -f "$f" ] && aptopts+=(--aptopt="$f"); done
  echo "packaging.chroot: making a bookworm root file system from $mirror (cached afterwards)"
  start=$(date +%s)
  if ! mmdebstrap --quiet --variant=apt --skip=cleanup/apt/lists "${aptopts[@]}" \
      bookworm "$out/bookworm-rootfs.new.tar" "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
      > "$out/mmdebstrap.log" 2>&1; then
    tail -20 "$out/mmdebstrap.log" >&2
    if grep -qiE 'could not resolve|failed to fetch|connection' "$out/mmdebstrap.log"; then
      skip "the Debian mirror $mirror cannot be reached"
    fi
    fail "mmdebstrap failed (log above)"
  fi
  mv "$out/bookworm-rootfs.new.tar" "$cache"
  echo "packaging.chroot: root file system made in $(($(date +%s) - start)) s"
fi

root=$(mktemp -d /tmp/stallwatch-chroot.XXXXXX)
mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -R -l "${mounts[i]}" 2>/dev/null || true; done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$cache"
bind() {  # bind SRC DST (recursive)
  mkdir -p "$root$2"
  mount --rbind "$1" "$root$2"
  mount --make-rslave "$root$2"
  mounts+=("$root$2")
}
bind /dev /dev
bind "$archives" /var/cache/apt/archives
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp "$deb" "$root/tmp/"
export DEBIAN_FRONTEND=noninteractive
install() {
  chroot "$root" apt-get install -y -q --no-install-recommends "/tmp/$(basename "$deb")" \
    > "$out/apt-install.log" 2>&1
}
start=$(date +%s)
if ! install; then
  chroot "$root" apt-get update -q > "$out/apt-update.log" 2>&1 || {
    tail -5 "$out/apt-update.log" >&2
    skip "apt in the chroot cannot reach the mirror"
  }
  install || { tail -30 "$out/apt-install.log" >&2; fail "apt could not install the .deb"; }
fi
echo "packaging.chroot: apt installed $(basename "$deb") and $(grep -c '^Setting up' "$out/apt-install.log") packages in $(($(date +%s) - start)) s"

got=$(chroot "$root" stallwatch version | sed -n 1p)
[ "$got" = "stallwatch, version $version (revision: $(sed 's/.*\.//' <<< "$version"))" ] ||
  fail "stallwatch version in the chroot prints '$got' (package $version)"
[ -f "$root/lib/systemd/system/stallwatch.service" ] || fail "the unit is not installed"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/stallwatch.service" ] ||
  fail "the package enabled the unit"
[ -f "$root/usr/share/man/man8/stallwatch.8.gz" ] || fail "no man page"

demo=$(chroot "$root" stallwatch demo incident --fast --db none 2>&1) ||
  fail "demo incident --fast failed: $demo"
grep -q "cpu_contention" <<< "$demo" || fail "demo incident told no cpu_contention chain: $demo"

bind /proc /proc
bind /sys /sys
set +e
check=$(chroot "$root" stallwatch check --json --db none)
rc=$?
set -e
[ "$rc" = 0 ] || fail "check --json exited $rc: $check"
grep -q '^{"ok":true,' <<< "$check" || fail "check --json says tracing is not possible: $check"
echo "packaging.chroot: version, demo incident --fast and check --json ok in bookworm"
