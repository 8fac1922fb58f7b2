#!/bin/sh
# Writes taskbox-config(5), the worker configuration file's page, from
# schemas/config.md itself: its paragraphs become DESCRIPTION (a
# paragraph led by "**Title.**" a subsection), its table of keys KEYS
# (each key with its type, default and variable, then its meaning), the
# paragraphs after the table NOTES, and examples/worker.json EXAMPLE. One source, so the page and the schema
# cannot disagree; tests/integration/cli/check_config_page.py reads the
# page as man renders it against the table, and the table against the
# program's own keys and defaults. The build runs it; `cmake --install`
# puts the page in share/man/man5, gzipped. Dated as manpages.sh dates
# the section 1 pages.
#   configpage.sh SOURCE_DIR OUTDIR VERSION
set -eu
src=$1 out=$2 version=$3
mkdir -p "$out"

if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
  date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
elif date=$(git -C "$src" log -1 --format=%cs 2>/dev/null) && [ -n "$date" ]; then
  :
else
  date=$(date -u +%Y-%m-%d)
fi

page=$out/taskbox-config.5
{
  printf '.TH TASKBOX-CONFIG 5 "%s" "taskbox %s" "taskbox manual"\n' "$date" "$version"
  printf '.nh\n.ad l\n'
  printf '.SH NAME\ntaskbox-config \\- the taskbox worker configuration file\n'
  printf '.SH SYNOPSIS\n.nf\n/etc/taskbox/worker.json\n$XDG_CONFIG_HOME/taskbox/config.json\n.fi\n'
  awk '
    # s with every "from" replaced by "to", literally (no regular
    # expressions, so backslashes mean what they say)
    function rep(s, from, to,    o, i) {
      o = ""
      while ((i = index(s, from)) > 0) {
        o = o substr(s, 1, i - 1) to
        s = substr(s, i + length(from))
      }
      return o s
    }
    # prose: **bold** and [text](link) (the text kept)
    function prose(s,    o, n, parts, i, m) {
      n = split(s, parts, /\*\*/)
      o = parts[1]
      for (i = 2; i <= n; i++) o = o (i % 2 ? "\\fR" : "\\fB") parts[i]
      while (match(o, /\[[^]]*\]\([^)]*\)/)) {
        m = substr(o, RSTART + 1, RLENGTH - 1)
        o = substr(o, 1, RSTART - 1) substr(m, 1, index(m, "](") - 1) substr(o, RSTART + RLENGTH)
      }
      return o
    }
    # Markdown text as roff text: `code` in bold with its hyphens as
    # minus signs (what is typed) and a place to break the line after
    # each comma (a long JSON example), the rest prose; the three
    # characters the schemas use beyond ASCII as groff names them
    function inline(s,    n, parts, i, o) {
      s = rep(s, "\\", "\\e")
      n = split(s, parts, "`")
      o = ""
      for (i = 1; i <= n; i++)
        o = o (i % 2 ? prose(parts[i]) : "\\fB" code(parts[i]) "\\fR")
      o = rep(o, "→", "\\(->"); o = rep(o, "–", "\\(en"); o = rep(o, "…", "...")
      return "\\&" o
    }
    function code(s) { return rep(rep(s, "-", "\\-"), ",", ",\\:") }
    function flush(    t) {
      if (para == "") return
      if (para ~ /^\*\*[^*]+\.\*\* /) {
        t = substr(para, 3, index(substr(para, 3), "**") - 2)
        sub(/\.$/, "", t)
        printf ".SS %s\n", t
        para = substr(para, length(t) + 7)
      } else {
        print ".PP"
      }
      print inline(para)
      para = ""
    }
    function cell(s) { gsub(/^ +| +$/, "", s); return rep(s, "\001", "|") }
    # one row of the table: key, type, default, meaning
    function row(line,    c, n, key, var) {
      line = rep(line, "\\|", "\001")
      n = split(line, c, "|")
      key = cell(c[2]); gsub(/`/, "", key)
      var = key == "v" ? "none" : cell(c[3]) ~ /^map/ ? "none (in the file only)" \
        : "`TASKBOX_" toupper(rep(key, ".", "_")) "`"
      printf ".TP\n\\fB%s\\fR\n", rep(key, "-", "\\-")
      print inline("Type: " cell(c[3]) ". Default: " cell(c[4]) ". Variable: " var ".")
      if (cell(c[5]) != "") { print ".br"; print inline(cell(c[5])) }
    }
    BEGIN { print ".SH DESCRIPTION" }
    NR == 1 && /^# / { next }
    /^\|/ {
      flush()
      if (!table) { print ".SH KEYS"; table = 1; next } # the header row
      if ($0 ~ /^\|[-| ]+\|$/) next                   # the rule under it
      row($0); after = 1; next
    }
    /^$/ { flush(); next }
    {
      if (after && para == "" && !said) { print ".SH NOTES"; said = 1 }
      para = para == "" ? $0 : para " " $0
    }
    END { flush() }
  ' "$src/schemas/config.md"
  printf '.SH EXAMPLE\n.nf\n'
  sed -e 's/\\/\\e/g' -e 's/^/\\\&/' "$src/examples/worker.json"
  printf '.fi\n'
  printf '.SH ENVIRONMENT\n'
  printf '.TP\n\\fBTASKBOX_CONFIG\\fR\nThe file to read, when no \\-\\-config names one.\n'
  printf '.TP\n\\fBTASKBOX_\\fR\\fIKEY\\fR\nEach key as KEYS names its variable; wins over the file.\n'
  printf '.TP\n\\fBAWS_ACCESS_KEY_ID\\fR, \\fBAWS_SECRET_ACCESS_KEY\\fR, \\fBAWS_SESSION_TOKEN\\fR\n'
  printf 'The S3 store'"'"'s credentials, never in the file.\n'
  printf '.SH FILES\n'
  printf '.TP\n\\fI/etc/taskbox/worker.json\\fR\nThe configuration of a worker run by the system.\n'
  printf '.TP\n\\fI$XDG_CONFIG_HOME/taskbox/config.json\\fR (\\fI~/.config/taskbox/config.json\\fR)\n'
  printf "A user's, read before /etc/taskbox/worker.json.\n"
  printf '.TP\n\\fI/etc/taskbox/runtimes/\\fR\nThe runtimes, in the packaged runtimes_dir.\n'
  printf '.SH SEE ALSO\n\\fBtaskbox\\fR(1), \\fBtaskbox\\-config\\fR(1), '
  printf '\\fBtaskbox\\-worker\\fR(1), \\fBtaskbox\\-schema\\fR(1)\n'
  printf '.PP\nschemas/config.md in share/doc/taskbox, from which this page is written.\n'
} >"$page"
# installed compressed, as Debian's policy has it (-n: no name or time inside)
gzip -9n -c "$page" >"$page.gz"
