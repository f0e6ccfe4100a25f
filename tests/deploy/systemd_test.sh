#!/usr/bin/env bash
# Offline checks of deploy/systemd (no running systemd needed):
# 1. `systemd-analyze verify` of the unit, with ExecStart pointed at the built binary (verify
#    refuses a unit whose ExecStart binary does not exist; /usr/local/bin/stallwatch is not
#    installed on a build host). The copy lives in a temporary directory under the unit's own
#    name; nothing else changes. Any warning fails the check, not only a non-zero exit.
# 2. `systemd-analyze security --offline=yes`: the exposure score must stay at or below
#    MAX_EXPOSURE (the unit scores 3.2 with systemd 252: 2.8 before issue #49 opened /dev/kmsg
#    and NVIDIA's device nodes to it, PrivateDevices and ProtectKernelLogs 0.2 each), so a
#    loosened sandbox fails.
# 3. The settings the daemon relies on (Type=notify, the watchdog, the state directory, the
#    exact capability set) are present.
# 4. The sample option files are accepted by `stallwatch run` (`--help` after the options
#    parses them and exits 0; an unknown option exits 2).
# Usage: systemd_test.sh STALLWATCH_BIN   (ctest passes build/stallwatch)
set -euo pipefail
MAX_EXPOSURE=3.2
bin=${1:?usage: systemd_test.sh STALLWATCH_BIN}
root=$(cd "$(dirname "$0")/../.." && pwd)
unit="$root/deploy/systemd/stallwatch.service"
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v systemd-analyze >/dev/null ||
  fail "systemd-analyze is missing: run \`bash scripts/install-deps.sh\` (Debian package systemd)"
[ -x "$bin" ] || fail "$bin is not built: run \`make\` (cmake --build build)"
bin=$(realpath "$bin")  # ExecStart needs an absolute path

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -q '^ExecStart=/usr/local/bin/stallwatch run ' "$unit" ||
  fail "ExecStart is not /usr/local/bin/stallwatch run ...: update this test with the unit"
sed "s#^ExecStart=/usr/local/bin/stallwatch #ExecStart=$bin #" "$unit" > "$tmp/stallwatch.service"

# 1. verify (it runs `man` for Documentation=man:stallwatch(8): the page the build generated,
# as the .deb installs it, is found through MANPATH)
man_page=$(dirname "$bin")/generated/stallwatch.8
[ -f "$man_page" ] || fail "no man page at $man_page: build the manpage target (help2man)"
mkdir -p "$tmp/man/man8" && cp "$man_page" "$tmp/man/man8/"
out=$(MANPATH="$tmp/man" systemd-analyze verify "$tmp/stallwatch.service" 2>&1) && rc=0 || rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  printf '%s\n' "$out" | sed "s#$tmp/#deploy/systemd/#" >&2
  fail "systemd-analyze verify: exit $rc, output above"
fi
echo "ok   systemd-analyze verify: no warnings"

# 2. security score
sec=$(systemd-analyze security --offline=yes --no-pager "$tmp/stallwatch.service" 2>&1) ||
  { printf '%s\n' "$sec" >&2; fail "systemd-analyze security --offline=yes failed"; }
score=$(printf '%s\n' "$sec" | sed -n 's/.*Overall exposure level for stallwatch.service: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || { printf '%s\n' "$sec" >&2; fail "no overall exposure level in the output"; }
if awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s > m) }'; then
  printf '%s\n' "$sec" | grep '✗' >&2 || true
  fail "exposure $score is above $MAX_EXPOSURE: a hardening setting was loosened (the ✗ lines above)"
fi
echo "ok   systemd-analyze security --offline=yes: exposure $score (at most $MAX_EXPOSURE)"

# 3. settings the daemon relies on
want=(
  "Type=notify" "NotifyAccess=main" "StateDirectory=stallwatch"
  "EnvironmentFile=-/etc/default/stallwatch"
  "ExecStart=/usr/local/bin/stallwatch run \$STALLWATCH_OPTS"
  "CapabilityBoundingSet=CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_SYSLOG"
  "AmbientCapabilities=CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_SYSLOG"
  "LimitMEMLOCK=infinity" "NoNewPrivileges=yes" "ProtectSystem=strict" "PrivateTmp=yes"
  "Restart=on-failure"
  # The Xid errors come from /dev/kmsg, NVML needs NVIDIA's nodes (issue #49): neither hidden.
  "ProtectKernelLogs=no" "DevicePolicy=closed" "DeviceAllow=/dev/kmsg r"
  "DeviceAllow=char-nvidia-frontend rw"
)
for line in "PrivateDevices=yes" "ProtectKernelLogs=yes"; do
  ! grep -qxF -- "$line" "$unit" || fail "deploy/systemd/stallwatch.service hides /dev/kmsg: $line"
done
for line in "${want[@]}"; do
  grep -qxF -- "$line" "$unit" || fail "deploy/systemd/stallwatch.service lacks the line: $line"
done
wd=$(sed -n 's/^WatchdogSec=\([0-9]*\)s$/\1/p' "$unit")
[ -n "$wd" ] && [ "$wd" -ge 30 ] ||
  fail "WatchdogSec must be set in seconds and well above the 5 s window (>= 30s), got '${wd:-unset}'"
echo "ok   unit settings: notify, watchdog ${wd}s, state directory, capabilities"

# 4. the sample option files
"$bin" run --config "$root/deploy/systemd/stallwatch.conf" --help >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; fail "stallwatch run refuses deploy/systemd/stallwatch.conf"; }
opts=$(set -a; . "$root/deploy/systemd/stallwatch.default"; printf '%s' "${STALLWATCH_OPTS:-}")
# shellcheck disable=SC2086  # split like systemd splits $STALLWATCH_OPTS
"$bin" run $opts --help >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; fail "stallwatch run refuses STALLWATCH_OPTS of deploy/systemd/stallwatch.default"; }
echo "ok   stallwatch.conf and stallwatch.default are accepted by \`stallwatch run\`"
