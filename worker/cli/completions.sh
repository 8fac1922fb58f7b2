#!/bin/sh
# Writes the shell completions from the program itself: the commands from
# `taskbox --help`, each command's verbs from its usage lines, and its
# options from the same table its parser reads (`--list-options`, one
# "--long<TAB>-l<TAB>flag|value" a line). bash's, and zsh's through
# bashcompinit. The build runs it; `cmake --install` puts them where
# bash-completion and zsh look (share/bash-completion/completions,
# share/zsh/site-functions).
#   completions.sh TASKBOX OUTDIR
set -eu
tb=$1 out=$2
mkdir -p "$out"
export LSAN_OPTIONS=detect_leaks=0 # a sanitizer build's --help, at build time

commands=$("$tb" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p' | paste -sd' ' -)

# verbs CMD: the words after "taskbox CMD" in its usage lines
verbs() {
  "$tb" "$1" --help | sed -n "s/^\(usage:\)\{0,1\} *taskbox $1 \([a-z][a-z]*\) .*/\2/p" | sort -u
}

# options CMD [VERB]: the table's long and short names; the names of the
# options taking a text value (file names complete after them) and a
# number (nothing does), as shell assignments
options() {
  "$tb" "$@" --list-options | awk -F '\t' '
    function add(list) { list = list "|" $1; if ($2 != "") list = list "|" $2; return list }
    { words = words " " $1; if ($2 != "") words = words " " $2 }
    $3 == "value" { vals = add(vals) }
    $3 == "number" { nums = add(nums) }
    END { printf "words=\"%s\" vals=\"%s\" nums=\"%s\"\n",
                 substr(words, 2), substr(vals, 2), substr(nums, 2) }'
}

# case_arm PATTERN CMD [VERB]: one arm of the completion function's case
case_arm() {
  pattern=$1; shift
  eval "$(options "$@")"
  echo "    $pattern)"
  if [ -n "$vals" ]; then
    echo "      case \$prev in $vals) COMPREPLY=(\$(compgen -f -- \"\$cur\")); return;; esac"
  fi
  if [ -n "$nums" ]; then
    echo "      case \$prev in $nums) COMPREPLY=(); return;; esac"
  fi
  echo "      COMPREPLY=(\$(compgen -W \"$words\" -- \"\$cur\"));;"
}

{
  echo "# bash completion for taskbox, written by completions.sh from the"
  echo "# program's --help and its option tables (--list-options)"
  echo "_taskbox() {"
  echo '  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}'
  echo '  local cmd=${COMP_WORDS[1]:-} verb=${COMP_WORDS[2]:-}'
  echo '  [ "$COMP_CWORD" -gt 2 ] || verb= # the verb itself is being typed'
  echo '  if [ "$COMP_CWORD" -eq 1 ]; then'
  echo "    COMPREPLY=(\$(compgen -W \"$commands --help --version\" -- \"\$cur\")); return"
  echo '  fi'
  echo '  case "$cmd $verb" in'
  for c in $commands; do
    vs=$(verbs "$c" | tr '\n' ' ')
    if [ -z "$vs" ]; then
      case_arm "\"$c \"*" "$c"
      continue
    fi
    for v in $vs; do
      case_arm "\"$c $v\"" "$c" "$v"
    done
    echo "    \"$c \"*) COMPREPLY=(\$(compgen -W \"$vs--help\" -- \"\$cur\"));;"
  done
  echo '  esac'
  echo "}"
  echo "complete -F _taskbox taskbox"
} >"$out/taskbox.bash"
{
  echo "#compdef taskbox"
  echo "# zsh completion for taskbox: bash's, through bashcompinit"
  echo "autoload -U +X bashcompinit && bashcompinit"
  sed -n '/^_taskbox()/,$p' "$out/taskbox.bash"
} >"$out/_taskbox"
