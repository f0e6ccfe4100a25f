#!/usr/bin/env bash
# Writes the stallwatch(8) man page from the binary itself: help2man over `stallwatch --help`
# and `--version`, plus one section per subcommand holding that subcommand's --help, so the
# page cannot drift from the program (CMake runs this at every build of the binary; the
# packaging test checks every subcommand's usage line is in it).
# Usage: scripts/manpage.sh BINARY OUTPUT
set -euo pipefail
bin=$1
out=$2
here=$(cd "$(dirname "$0")/.." && pwd)
include=$(mktemp)
trap 'rm -f "$include"' EXIT

# roff: backslashes escaped, a line starting with '.' or '\'' protected.
roff() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

{
  echo "[COMMANDS]"
  for cmd in run check explain query demo stacks export mcp; do
    echo ".SS \"stallwatch $cmd\""
    echo ".nf"
    "$bin" "$cmd" --help | roff
    echo ".fi"
  done
  echo "[FILES]"
  echo ".TP"
  echo ".I /etc/default/stallwatch"
  echo "STALLWATCH_OPTS and OTEL_* variables for the systemd unit."
  echo ".TP"
  echo ".I /etc/stallwatch/stallwatch.conf"
  echo "run's flags as name = value lines (run --config)."
  echo ".TP"
  echo ".I /var/lib/stallwatch/stallwatch.db"
  echo "the chain store (SQLite, WAL)."
  echo "[SEE ALSO]"
  echo "The README and docs/ of the source; /usr/share/doc/stallwatch/runbooks/ for the alerts."
} > "$include"

# A reproducible date: the last commit's, when the source is a git checkout.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)
  export SOURCE_DATE_EPOCH
fi
# The footer's version: `stallwatch version` without its commit (0.1.0+git340), so that it
# does not run into the date in the middle of the footer; the exporters' --version shape
# (`stallwatch, version ...`) is not help2man's `program version` either.
version=$("$bin" version | sed -n '1s/^stallwatch, version \([^ ]*\) .*/\1/p')
[ -n "$version" ] || { echo "manpage.sh: $bin version printed no version" >&2; exit 1; }
version=$(sed -E 's/^(.*\+git[0-9]+)\.[0-9a-f]+$/\1/' <<< "$version")
help2man --no-info --section 8 \
  --name "explain slow CUDA calls by what the host did to them (eBPF)" \
  --version-string "stallwatch $version" \
  --include "$include" --output "$out" "$bin"
