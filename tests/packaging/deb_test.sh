#!/usr/bin/env bash
# packaging.deb: makes the .deb from this build with CPack (as `make deb` does) into
# PKG_DIR/deb and checks it with Debian's tools: its name and version are the binary's
# (`stallwatch version`), the file list (binary, unit, conffiles, dashboards, alerts, runbooks,
# man page, bash completion, copyright, changelog), Depends computed by dpkg-shlibdeps and free of test-only
# libraries, the unit pointing at /usr/bin and not enabled, lintian without errors, and the
# man page carrying every subcommand's usage. Leaves the .deb for packaging.chroot.
# Usage: deb_test.sh BUILD_DIR PKG_DIR
set -euo pipefail
build=$1
out=$2
fail() { echo "packaging.deb: $*" >&2; exit 1; }
for tool in cpack dpkg-deb dpkg-shlibdeps lintian help2man; do
  command -v "$tool" > /dev/null || fail "$tool is missing: run bash scripts/install-deps.sh"
done
rm -rf "$out/deb"
mkdir -p "$out/deb"
if ! (cd "$build" && cpack -G DEB -B "$out/deb" > "$out/deb/cpack.log" 2>&1); then
  tail -40 "$out/deb/cpack.log" >&2
  fail "cpack failed (log above)"
fi
debs=("$out"/deb/stallwatch_*.deb)
[ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] || fail "expected one stallwatch_*.deb in $out/deb"
deb=${debs[0]}
echo "packaging.deb: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB"

# `stallwatch, version 0.1.0+git340.0fa3feda3de1 (revision: 0fa3feda3de1)`, then build date,
# compiler and platform lines.
version=$("$build/stallwatch" version | sed -n '1s/^stallwatch, version \([^ ]*\) (revision: [0-9a-f]*)$/\1/p')
[[ "$version" =~ ^0\.1\.0\+git[0-9]+\.[0-9a-f]{12}$ ]] ||
  fail "stallwatch version prints '$version', not 0.1.0+git<commits>.<sha>"
dpkg --validate-version "$version" || fail "'$version' is not a valid Debian version"
arch=$(dpkg --print-architecture)
[ "$(basename "$deb")" = "stallwatch_${version}_${arch}.deb" ] ||
  fail "named $(basename "$deb"), expected stallwatch_${version}_${arch}.deb"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "control Version is not $version"

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's,^\./,/,' > "$out/deb/files"
for f in /usr/bin/stallwatch /lib/systemd/system/stallwatch.service \
  /etc/default/stallwatch /etc/stallwatch/stallwatch.conf \
  /usr/share/man/man8/stallwatch.8.gz /usr/share/bash-completion/completions/stallwatch \
  /usr/share/doc/stallwatch/copyright \
  /usr/share/doc/stallwatch/changelog.gz /usr/share/doc/stallwatch/runbooks/StallwatchCriticalChain.md \
  /usr/share/stallwatch/alerts/stallwatch.rules.yml /usr/share/stallwatch/alerts/alertmanager.yml \
  /usr/share/stallwatch/dashboards/stallwatch-overview.json \
  /usr/share/stallwatch/dashboards/stallwatch-workload.json; do
  grep -qx "$f" "$out/deb/files" || fail "$f is not in the package"
done
! grep -q '/etc/systemd/system/.*wants' "$out/deb/files" || fail "the unit is enabled by the package"

depends=$(dpkg-deb -f "$deb" Depends)
echo "packaging.deb: Depends: $depends"
for lib in libbpf1 libsqlite3-0 libmicrohttpd12 libgnutls30 libcurl4 libyaml-cpp0.7 libdeflate0 \
  libboost-program-options1.74.0 libc6; do
  [[ "$depends" == *"$lib"* ]] || fail "Depends lacks $lib: $depends"
done
for lib in prometheus-cpp libprometheus libgtest libgmock; do
  [[ "$depends" != *"$lib"* ]] || fail "Depends names the test-only $lib: $depends"
done
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles > "$out/deb/conffiles"
[ "$(sort "$out/deb/conffiles" | tr '\n' ' ')" = "/etc/default/stallwatch /etc/stallwatch/stallwatch.conf " ] ||
  fail "conffiles: $(cat "$out/deb/conffiles")"

unit=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/stallwatch.service)
grep -q '^ExecStart=/usr/bin/stallwatch run \$STALLWATCH_OPTS$' <<< "$unit" ||
  fail "the unit's ExecStart is not /usr/bin/stallwatch: $(grep ExecStart <<< "$unit")"
grep -q '^StateDirectory=stallwatch$' <<< "$unit" || fail "the unit has no StateDirectory"

man=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/man/man8/stallwatch.8.gz | gzip -dc)
for cmd in run check explain query demo stacks export mcp; do
  usage=$("$build/stallwatch" "$cmd" --help | sed -n 1p)
  grep -qF -- "$usage" <<< "$man" || fail "the man page lacks '$usage' (stallwatch $cmd --help)"
done
# The footer names the version without its commit (the whole string would run into the date).
grep -qF "stallwatch ${version%.*}" <<< "$man" || fail "the man page does not name version ${version%.*}"

# lintian: no errors; warnings are printed (docs/deployment.md "Install from the .deb" explains them).
lintian --fail-on error --no-tag-display-limit "$deb" > "$out/deb/lintian.txt" 2>&1 || {
  cat "$out/deb/lintian.txt" >&2
  fail "lintian reports errors"
}
echo "packaging.deb: lintian: $(grep -c '^E:' "$out/deb/lintian.txt" || true) errors, $(grep -c '^W:' "$out/deb/lintian.txt" || true) warnings"
sed 's/^/  /' "$out/deb/lintian.txt"
echo "packaging.deb: ok"
