#!/bin/sh
# Writes the shell completions from the program's own --help (the same
# source as the man pages): bash's, and zsh's through bashcompinit.
# The build runs it; `cmake --install` puts them where bash-completion and
# zsh look (share/bash-completion/completions, share/zsh/site-functions).
#   completions.sh TASKBOX OUTDIR
set -eu
tb=$1 out=$2
mkdir -p "$out"
export LSAN_OPTIONS=detect_leaks=0 # a sanitizer build's --help, at build time

commands=$("$tb" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p' | tr '\n' ' ')
{
  echo "# bash completion for taskbox, written from its --help by completions.sh"
  echo "_taskbox() {"
  echo '  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]:-}'
  echo '  if [ "$COMP_CWORD" -eq 1 ]; then'
  echo "    COMPREPLY=(\$(compgen -W \"$commands --help --version\" -- \"\$cur\")); return"
  echo '  fi'
  echo '  case $cmd in'
  for c in $commands; do
    opts=$("$tb" "$c" --help | grep -o -- '--[a-z][a-z-]*' | sort -u | tr '\n' ' ')
    words=$("$tb" "$c" --help | sed -n 's/^usage: taskbox [a-z]* \([a-z][a-z]*\) .*/\1/p; s/^       taskbox [a-z]* \([a-z][a-z]*\) .*/\1/p' | sort -u | tr '\n' ' ')
    echo "    $c) COMPREPLY=(\$(compgen -W \"$opts$words--help --version\" -- \"\$cur\"));;"
  done
  echo '  esac'
  echo '  case ${COMP_WORDS[COMP_CWORD-1]} in'
  echo '    --config|--file|-o|--out) COMPREPLY=($(compgen -f -- "$cur"));;'
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
