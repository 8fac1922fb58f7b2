#!/bin/sh
# Writes the man pages, taskbox.1 and taskbox-<command>.1, from the
# program's own --help (one source for both): the build runs it, and
# `cmake --install` puts them in share/man/man1.
#   manpages.sh TASKBOX OUTDIR VERSION
set -eu
tb=$1 out=$2 version=$3
mkdir -p "$out"
export LSAN_OPTIONS=detect_leaks=0 # a sanitizer build's --help, at build time

# roff-safe text: backslashes doubled, a leading . or ' made literal
text() { sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\&'/"; }

# page NAME SUMMARY SEE_ALSO < help text
page() {
  {
    printf '.TH %s 1 "" "taskbox %s" "taskbox manual"\n' \
      "$(printf '%s' "$1" | tr 'a-z' 'A-Z')" "$version"
    printf '.SH NAME\n%s \\- %s\n' "$1" "$2"
    printf '.SH DESCRIPTION\n.nf\n'
    text
    printf '.fi\n.SH SEE ALSO\n%s\n' "$3"
    printf '.PP\nThe README and schemas/ in share/doc/taskbox say the rest.\n'
  } >"$out/$1.1"
}

commands=$("$tb" --help | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z]*\)  *\(.*\)$/\1\t\2/p')
see=$(printf '%s\n' "$commands" | cut -f1 | sed 's/^\(.*\)$/\\fBtaskbox-\1\\fR(1)/' | paste -sd, - | sed 's/,/, /g')
"$tb" --help | page taskbox "sandboxed agent tasks from Kafka, one namespaced sandbox each" "$see"
printf '%s\n' "$commands" | while IFS="$(printf '\t')" read -r name summary; do
  [ -n "$name" ] || continue
  "$tb" "$name" --help | page "taskbox-$name" "$summary" '\fBtaskbox\fR(1)'
done
