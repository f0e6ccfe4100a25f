#!/usr/bin/env bash
# unit.completion: the bash completion (packaging/completion/stallwatch.bash) sourced in bash
# and asked as bash asks it (COMP_WORDS, COMP_CWORD): the commands, each command's flags, the
# demo's scenarios, a flag's choices and file names, all from the binary itself (issue #51).
# Usage: completion_test.sh STALLWATCH_BIN
set -euo pipefail
bin=${1:?usage: completion_test.sh STALLWATCH_BIN}
here=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=packaging/completion/stallwatch.bash disable=SC1091
source "$here/packaging/completion/stallwatch.bash"
problems=0
problem() { echo "completion: $*" >&2; problems=$((problems + 1)); }

complete -p stallwatch > /dev/null || problem "no completion registered for stallwatch"

# The completions of the words given, the last one being completed, one a line, sorted.
complete_words() {
  COMP_WORDS=("$bin" "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE="${COMP_WORDS[*]}"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _stallwatch
  ((${#COMPREPLY[@]})) && printf '%s\n' "${COMPREPLY[@]}" | sort
  return 0
}
expect() {  # expect "WORDS..." "EXPECTED (space-separated, sorted)"
  local words=$1 want=$2 got
  # shellcheck disable=SC2086
  got=$(complete_words $words | tr '\n' ' ' | sed 's/ $//')
  [ "$got" = "$want" ] || problem "stallwatch $words<TAB>: got '$got', want '$want'"
}

expect "ru" "run"
expect "ex" "explain export"
expect "run --win" "--window"
expect "run --web.m" "--web.max-connections"
expect "run --stacks ''" "off on"
expect "run --window ''" ""
expect "demo cpu-" "cpu-contention cpu-steal cpu-throttle"
expect "demo --otlp-end" "--otlp-endpoint"
expect "help st" "stacks"
expect "query --format ''" "csv json table"
expect "export --format ''" "chrome-json perfetto"
expect "stacks --" "--call --cgroup --db --help --pid --since --timeout --version"
expect "explain --per-process --j" "--json"
expect "-" "--help --version"

# Every command: `stallwatch <TAB>` offers it, and its flags are the ones its --help lists.
commands=$(complete_words '')
for cmd in run check explain query export stacks mcp demo version help; do
  grep -qx "$cmd" <<< "$commands" || problem "stallwatch <TAB> lacks $cmd: ${commands//$'\n'/ }"
done
for cmd in run check explain query export stacks mcp demo; do
  flags=$(complete_words "$cmd" --)
  grep -qx -- --help <<< "$flags" || problem "stallwatch $cmd --<TAB> lacks --help"
  grep -qx -- --version <<< "$flags" || problem "stallwatch $cmd --<TAB> lacks --version"
  for f in $flags; do
    # Each one is a flag of the command: Boost takes it (an unknown one is a usage error).
    # --help first, so that nothing runs whatever the flag (a value flag then lacks its value).
    out=$(timeout 10 "$bin" "$cmd" --help "$f" 2>&1 < /dev/null > /dev/null) || true
    [[ $out != *"unrecognised option '$f'"* ]] || problem "$cmd: $f is offered but refused"
  done
done
[ "$(complete_words run -- | wc -l)" -gt 50 ] || problem "run --<TAB> offers fewer than 50 flags"

# `stallwatch demo <TAB>`: exactly the scenarios of demo --list.
want=$("$bin" demo --list | awk '{print $1}' | sort | tr '\n' ' ' | sed 's/ $//')
[ -n "$want" ] || problem "demo --list printed nothing"
expect "demo ''" "$want"

# After a flag that takes a PATH or FILE: file names; after one of DIRs: directories.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
touch "$dir/store.db"
mkdir "$dir/libs"
expect "explain --db $dir/st" "$dir/store.db"
expect "run --config $dir/st" "$dir/store.db"
expect "run --library-dirs $dir/" "$dir/libs"

if [ "$problems" -gt 0 ]; then
  echo "completion: $problems problem(s)" >&2
  exit 1
fi
echo "completion: commands, flags, scenarios, choices and paths complete"
