#!/usr/bin/env bash
# Installs every build and test dependency of stallwatch from Debian 12 packages.
# Idempotent: packages already present are left alone; apt is only asked when one is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config make
  clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev
  prometheus-cpp-dev libcivetweb-dev libsqlite3-dev sqlite3
  libboost-program-options-dev libgtest-dev libgmock-dev
  libcurl4-openssl-dev
  prometheus curl
  iproute2 nftables util-linux procps
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
