#!/usr/bin/env bash
# The README's picture of what a user sees: the incident report of `stallwatch demo incident`,
# drawn from a real run of the built binary, written between the README's marker comments
#   <!-- readme-picture:begin ... -->  and  <!-- readme-picture:end -->
# (issue #51). The demo and its store live in a temporary directory that is removed at the end:
# nothing is written under /var/lib/stallwatch, and no root is needed.
#
#   scripts/readme-picture.sh            rewrite the block in README.md
#   scripts/readme-picture.sh --check    exit 1 when the block is not what the binary prints now
#                                        (clock times, dates and the host name aside)
# The binary: $STALLWATCH_BIN, else build/stallwatch.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=write
case "${1:-}" in
  --check) mode=check ;;
  "") ;;
  *) echo "usage: scripts/readme-picture.sh [--check]" >&2; exit 2 ;;
esac

bin=${STALLWATCH_BIN:-build/stallwatch}
readme=README.md
begin='<!-- readme-picture:begin'
end='<!-- readme-picture:end -->'

fail() { echo "readme-picture: $*" >&2; exit 1; }
[ -x "$bin" ] || fail "$bin is not built: run \`make build\` (or set STALLWATCH_BIN)"
[ "$(grep -c "^$begin" "$readme")" -eq 1 ] && [ "$(grep -c "^$end\$" "$readme")" -eq 1 ] ||
  fail "$readme needs exactly one '$begin ... -->' line and one '$end' line"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The demo's default store is a file in $TMPDIR; both are pinned to the temporary directory.
export TMPDIR=$tmp
db=$tmp/demo.db
"$bin" demo incident --fast --db "$db" > "$tmp/demo.txt" 2>&1 ||
  { cat "$tmp/demo.txt" >&2; fail "'$bin demo incident' failed"; }
"$bin" explain --db "$db" --since 1h > "$tmp/explain.txt" 2> "$tmp/explain.err" ||
  { cat "$tmp/explain.err" >&2; fail "'$bin explain' failed"; }

{
  echo '```console'
  echo '$ stallwatch demo incident --fast --db /tmp/demo.db > /dev/null'
  echo '$ stallwatch explain --db /tmp/demo.db --since 1h'
  cat "$tmp/explain.txt"
  echo '```'
} > "$tmp/block.txt"

# The README with the block between the markers replaced by $1.
splice() {
  awk -v block="$1" -v begin="$begin" -v end="$end" '
    index($0, begin) == 1 { print; while ((getline line < block) > 0) print line; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }' "$readme"
}

if [ "$mode" = check ]; then
  # What changes from run to run: the wall clock (dates, times of day) and the host's name.
  normalise() {
    sed -E 's/[0-9]{4}-[0-9]{2}-[0-9]{2} ?//g; s/[0-9]{2}:[0-9]{2}:[0-9]{2}/HH:MM:SS/g;
            s/^(stallwatch explain: host )[^,]*,/\1HOST,/'
  }
  awk -v begin="$begin" -v end="$end" '
    index($0, begin) == 1 { on = 1; next }
    $0 == end { on = 0 }
    on { print }' "$readme" | normalise > "$tmp/have.txt"
  normalise < "$tmp/block.txt" > "$tmp/want.txt"
  if ! diff -u "$tmp/have.txt" "$tmp/want.txt" > "$tmp/diff.txt"; then
    cat "$tmp/diff.txt" >&2
    fail "the README's picture is not what $bin prints now: run scripts/readme-picture.sh and commit README.md"
  fi
  echo "readme-picture: README.md's picture matches $bin"
  exit 0
fi

splice "$tmp/block.txt" > "$tmp/README.md"
if cmp -s "$tmp/README.md" "$readme"; then
  echo "readme-picture: README.md already current"
else
  cat "$tmp/README.md" > "$readme"
  echo "readme-picture: README.md's picture rewritten from $bin ($(wc -l < "$tmp/explain.txt") lines of explain)"
fi
