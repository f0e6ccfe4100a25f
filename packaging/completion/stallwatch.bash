# bash completion for stallwatch (installed as share/bash-completion/completions/stallwatch).
#
# Asks the binary being completed, so it never lags behind it: the commands from
# `stallwatch --help`, a command's flags from `stallwatch CMD --help` (the option lines and the
# usage lines, never flags a description mentions), the scenarios from `stallwatch demo --list`.
# After a flag, its placeholder in --help decides: PATH/FILE complete file names, DIR
# directories, choices such as on|off complete those, any other placeholder (DURATION, SIZE)
# nothing.

# The binary as typed (build/stallwatch, ~/bin/stallwatch, stallwatch).
_stallwatch_bin() {
  local bin=${COMP_WORDS[0]}
  # shellcheck disable=SC2088 # the tilde as typed, left unexpanded in COMP_WORDS
  [[ $bin == "~/"* ]] && bin=$HOME/${bin#"~/"}
  command -v -- "$bin" > /dev/null 2>&1 && printf '%s\n' "$bin"
}

# The commands: the `  name   text` lines of the top-level usage.
_stallwatch_commands() {
  "$1" --help 2> /dev/null | sed -n 's/^  \([a-z][a-z-]*\)  .*/\1/p'
}

# The long flags of command $2, one a line: every --flag of its usage lines and of its option
# lines up to their description (two spaces). A family such as --otlp-* stands for run's.
_stallwatch_flags() {
  local help
  help=$("$1" "$2" --help 2> /dev/null) || return
  awk '
    /^usage:/ || /^[ \t]*\[/ { line = $0 }
    /^[ \t]*-/ { line = $0; sub(/^[ \t]+/, "", line); sub(/  .*/, "", line) }
    {
      while (line != "" && match(line, /--[a-z][a-z0-9.-]*[a-z0-9]/)) {
        flag = substr(line, RSTART, RLENGTH)
        rest = substr(line, RSTART + RLENGTH)
        if (substr(rest, 1, 2) == "-*") print flag "-*"; else print flag
        line = rest
      }
      line = ""
    }' <<< "$help" | while read -r flag; do
    if [[ $flag == *'-*' && $2 != run ]]; then
      _stallwatch_flags "$1" run | grep -- "^${flag%\*}"
    elif [[ $flag != *'*' ]]; then
      printf '%s\n' "$flag"
    fi
  done | sort -u
}

# What flag $3 of command $2 takes, as its --help shows it (`--db PATH` -> PATH); empty for a
# switch.
_stallwatch_placeholder() {
  "$1" "$2" --help 2> /dev/null | awk -v flag="$3" '
    /^usage:/ || /^[ \t]*\[/ { line = $0 }
    /^[ \t]*-/ { line = $0; sub(/^[ \t]+/, "", line); sub(/  .*/, "", line) }
    line != "" {
      n = split(line, words, /[ \t\[\],]+/)
      for (i = 1; i < n; i++) {
        if (words[i] == flag && words[i + 1] !~ /^-/ && words[i + 1] != "") {
          print words[i + 1]
          exit
        }
      }
      line = ""
    }'
}

_stallwatch() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]} bin cmd
  COMPREPLY=()
  bin=$(_stallwatch_bin) || return 0
  [ -n "$bin" ] || return 0
  if ((COMP_CWORD == 1)); then
    if [[ $cur == -* ]]; then
      mapfile -t COMPREPLY < <(compgen -W "--help --version" -- "$cur")
    else
      mapfile -t COMPREPLY < <(compgen -W "$(_stallwatch_commands "$bin")" -- "$cur")
    fi
    return 0
  fi
  cmd=${COMP_WORDS[1]}
  if [[ $cmd == help ]]; then
    ((COMP_CWORD == 2)) &&
      mapfile -t COMPREPLY < <(compgen -W "$(_stallwatch_commands "$bin")" -- "$cur")
    return 0
  fi
  if [[ $prev == -* ]]; then
    local placeholder
    placeholder=$(_stallwatch_placeholder "$bin" "$cmd" "$prev")
    case $placeholder in
      '') ;;  # a switch: complete what follows as usual
      DIR*)
        mapfile -t COMPREPLY < <(compgen -d -- "$cur")
        return 0
        ;;
      *PATH* | *FILE*)
        mapfile -t COMPREPLY < <(compgen -f -- "$cur")
        return 0
        ;;
      *'|'*)
        if [[ $placeholder =~ ^[a-z0-9|-]+$ ]]; then
          mapfile -t COMPREPLY < <(compgen -W "${placeholder//|/ }" -- "$cur")
        fi
        return 0
        ;;
      *) return 0 ;;  # a value to type: DURATION, SIZE, N, URL
    esac
  fi
  if [[ $cur == -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$(_stallwatch_flags "$bin" "$cmd")" -- "$cur")
  elif [[ $cmd == demo ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$("$bin" demo --list 2> /dev/null | awk '{print $1}')" -- "$cur")
  elif [[ $cmd == query ]]; then
    :  # the SQL: nothing to offer
  fi
  return 0
}

complete -F _stallwatch stallwatch
