#!/usr/bin/env bash
# Installs every build and test dependency of stallwatch from Debian 12 packages, then the npm
# packages of the e2e OTLP tests (tests/e2e/otlp, pinned by its package-lock.json).
# Idempotent: packages already present are left alone; apt is only asked when one is missing,
# npm only when node_modules is missing or older than the lockfile.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config make
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev libdeflate-dev
  prometheus-cpp-dev libsqlite3-dev sqlite3
  libmicrohttpd-dev libgnutls28-dev libyaml-cpp-dev libcrypt-dev openssl
  libboost-program-options-dev libgtest-dev libgmock-dev
  libcurl4-openssl-dev nlohmann-json3-dev
  prometheus prometheus-alertmanager curl
  yamllint systemd protobuf-compiler
  help2man dpkg-dev lintian mmdebstrap fakeroot
  iproute2 nftables util-linux procps
  qemu-system-x86 busybox-static xz-utils
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

sudo_cmd=()
need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: $*" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
}
apt_install() {
  need_root "$@"
  echo "install-deps: installing $*"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@"
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  apt_install "${missing[@]}"
fi

# Node and npm for the e2e OTLP tests: Debian's, unless a node is already on PATH.
if ! command -v node >/dev/null; then
  apt_install nodejs npm
elif ! command -v npm >/dev/null; then
  apt_install npm
fi

# The npm packages of the tests (the OTLP decoder of the e2e tests, @grafana/schema and
# TypeScript for the dashboards, Kubernetes schemas for the manifests), exactly as each
# lockfile pins them; a directory is skipped when its node_modules is newer than its lockfile.
for lock in tests/*/package-lock.json tests/*/*/package-lock.json; do
  [ -f "$lock" ] || continue
  dir=$(dirname "$lock")
  if [ ! -d "$dir/node_modules" ] || [ "$lock" -nt "$dir/node_modules" ]; then
    echo "install-deps: npm ci in $dir"
    npm ci --no-audit --no-fund --loglevel=error --prefix "$dir"
    touch "$dir/node_modules"  # newer than the lockfile: up to date until the lockfile changes
  else
    echo "install-deps: $dir/node_modules up to date"
  fi
done

# NVIDIA's real driver library for the privileged tests, unpacked (never installed) into the
# build tree (scripts/fetch-libcuda.sh; skipped with a warning when it cannot be downloaded).
bash scripts/fetch-libcuda.sh "${BUILD:-build}/nvidia"
