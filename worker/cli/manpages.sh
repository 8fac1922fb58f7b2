#!/bin/sh
# Writes the man pages, taskbox.1 and taskbox-<command>.1, from the
# program's own --help and --list-options (one source for both): the
# build runs it, and `cmake --install` puts them in share/man/man1. Each
# page has NAME, SYNOPSIS (the usage lines), DESCRIPTION (the rest of the
# help), OPTIONS (from the option table), EXIT STATUS (the help's "Exit:"
# paragraph), ENVIRONMENT, FILES and SEE ALSO, and is dated by the last
# commit (SOURCE_DATE_EPOCH wins; today's date outside a checkout).
#   manpages.sh TASKBOX OUTDIR VERSION [SOURCE_DIR]
set -eu
tb=$1 out=$2 version=$3 src=${4:-.}
mkdir -p "$out"
export LSAN_OPTIONS=detect_leaks=0 # a sanitizer build's --help, at build time

if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
elif date=$(git -C "$src" log -1 --format=%cs 2>/dev/null) && [ -n "$date" ]; then
  :
else
  date=$(date -u +%Y-%m-%d)
fi

# roff-safe text: backslashes doubled, a leading . or ' made literal,
# hyphens that start an option made minus signs
text() { sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\&'/" -e 's/\(^\|[ [(]\)--/\1\\-\\-/g' \
  -e 's/\(^\|[ [(]\)-\([a-zA-Z]\)/\1\\-\2/g'; }

# The help text's parts, from stdin into $tmp.*: synopsis (usage lines),
# exit (the "Exit:" paragraph), body (the rest, "Short forms" left out:
# OPTIONS says them).
split_help() {
  awk -v dir="$tmp" '
    BEGIN { part = "body" }
    /^usage: / { sub(/^usage: /, ""); print > (dir ".synopsis"); part = "usage"; next }
    part == "usage" && /^       taskbox / { sub(/^ +/, ""); print > (dir ".synopsis"); next }
    part == "usage" { part = "body" }
    /^Exit: / { part = "exit"; sub(/^Exit: /, "") }
    /^Short forms:/ { part = "short" }
    part == "short" { next }
    part == "exit" && /^$/ { part = "body"; next }
    { print > (dir "." part) }
  '
}

# OPTIONS from `taskbox CMD --list-options`: name, letter, kind.
options() {
  "$tb" "$@" --list-options 2>/dev/null | while IFS="$(printf '\t')" read -r name letter kind; do
    [ -n "$name" ] || continue
    printf '.TP\n'
    value=""
    [ "$kind" = value ] && value=' \fIVALUE\fR'
    [ "$kind" = number ] && value=' \fIN\fR'
    if [ -n "$letter" ] && [ "$letter" != "-" ]; then
      printf '\\fB\\-%s\\fR, \\fB\\-\\-%s\\fR%s\n' "${letter#-}" "${name#--}" "$value"
    else
      printf '\\fB\\-\\-%s\\fR%s\n' "${name#--}" "$value"
    fi
    case $name in
      --help) echo "Print this usage and exit." ;;
      --version) echo "Print the version, the commit and the libraries, and exit." ;;
      --config) echo "The worker configuration file (schemas/config.md); otherwise found as FILES says." ;;
      --json) echo "Print JSON instead of text." ;;
      *) echo "See DESCRIPTION." ;;
    esac
  done
}

# page NAME SUMMARY SEE_ALSO CMD... (the command's words; none: taskbox)
page() {
  name=$1 summary=$2 see=$3; shift 3
  tmp=$(mktemp -d)/p
  "$tb" "$@" --help | split_help
  {
    printf '.TH %s 1 "%s" "taskbox %s" "taskbox manual"\n' \
      "$(printf '%s' "$name" | tr 'a-z' 'A-Z')" "$date" "$version"
    printf '.SH NAME\n%s \\- %s\n' "$name" "$summary"
    if [ -s "$tmp.synopsis" ]; then
      printf '.SH SYNOPSIS\n.nf\n'; text <"$tmp.synopsis"; printf '.fi\n'
    fi
    printf '.SH DESCRIPTION\n.nf\n'; [ -s "$tmp.body" ] && text <"$tmp.body"; printf '.fi\n'
    printf '.SH OPTIONS\n'
    options "$@"
    if [ -s "$tmp.exit" ]; then
      printf '.SH EXIT STATUS\n.nf\n'; text <"$tmp.exit"; printf '.fi\n'
    fi
    printf '.SH ENVIRONMENT\n'
    printf '.TP\n\\fBTASKBOX_CONFIG\\fR\nThe configuration file, when \\-\\-config names none.\n'
    printf '.TP\n\\fBTASKBOX_\\fR\\fIKEY\\fR\n'
    printf 'Each configuration key, its path in capitals with . as _\n(\\fBTASKBOX_KAFKA_BROKERS\\fR for kafka.brokers); wins over the file.\n'
    printf '.TP\n\\fBAWS_ACCESS_KEY_ID\\fR, \\fBAWS_SECRET_ACCESS_KEY\\fR, \\fBAWS_SESSION_TOKEN\\fR\n'
    printf 'The S3 store'"'"'s credentials, for the commands that open it.\n'
    printf '.SH FILES\n'
    printf '.TP\n\\fI$XDG_CONFIG_HOME/taskbox/config.json\\fR (\\fI~/.config/taskbox/config.json\\fR)\n'
    printf 'The configuration, when neither \\-\\-config nor TASKBOX_CONFIG names one.\n'
    printf '.TP\n\\fI/etc/taskbox/worker.json\\fR\nThe configuration, when none of those is there.\n'
    printf 'Its keys: \\fBtaskbox-config\\fR(5).\n'
    printf '.SH SEE ALSO\n%s\n' "$see"
    printf '.PP\nThe README, docs/ and schemas/ in share/doc/taskbox say the rest.\n'
  } >"$out/$name.1"
  rm -rf "$(dirname "$tmp")"
}

commands=$("$tb" --help | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z]*\)  *\(.*\)$/\1\t\2/p')
see=$(printf '%s\n' "$commands" | cut -f1 | sed 's/^\(.*\)$/\\fBtaskbox-\1\\fR(1)/' | paste -sd, - | sed 's/,/, /g')
page taskbox "sandboxed agent tasks from Kafka, one namespaced sandbox each" \
  "$see, \\fBtaskbox-config\\fR(5)"
printf '%s\n' "$commands" | while IFS="$(printf '\t')" read -r name summary; do
  [ -n "$name" ] || continue
  page "taskbox-$name" "$summary" '\fBtaskbox\fR(1), \fBtaskbox-config\fR(5)' "$name"
done
# installed compressed, as Debian's policy has it (-n: no name or time
# inside, so a rebuild gives the same bytes); the .1 stay for the tests
for f in "$out"/*.1; do gzip -9n -c "$f" >"$f.gz"; done
