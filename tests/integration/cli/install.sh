#!/usr/bin/env bash
# `cmake --install` lays out a complete system under a fresh prefix, and
# the installed taskbox works from there alone: its --version, and the
# demo (sandboxes, the example recipes from share/taskbox/recipes, the
# init from libexec/taskbox) run from / in a mount namespace where the
# source and build trees are empty tmpfs. Usage: install.sh BUILD_DIR
# SOURCE_DIR. As root (the demo builds sandboxes); skips (77) otherwise.
set -u
build=$1 root=$2
[ "$(id -u)" = 0 ] || { echo "skipped: the demo needs root"; exit 77; }
command -v unshare >/dev/null || { echo "skipped: no unshare(1)"; exit 77; }
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
tmp=$(mktemp -d /tmp/tb-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/usr
# a sanitizer build's leak suppressions, where the hidden source tree's are not
cp "$root/tests/tools/lsan.supp" "$tmp/lsan.supp"
export LSAN_OPTIONS=suppressions=$tmp/lsan.supp

if cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then ok; else
  bad "cmake --install"; tail -20 "$tmp/install.log"; fi
for f in bin/taskbox libexec/taskbox/taskbox-sandbox-init libexec/taskbox/taskbox-demo-agent \
         share/taskbox/recipes/hello/taskbox.json share/taskbox/recipes/chat/taskbox.json \
         share/doc/taskbox/examples/worker.json share/doc/taskbox/examples/runtimes/default.json \
         lib/systemd/system/taskbox-worker.service share/doc/taskbox/LICENSE \
         share/doc/taskbox/README.md share/doc/taskbox/schemas/task.md \
         share/man/man1/taskbox.1.gz share/man/man1/taskbox-worker.1.gz \
         share/man/man1/taskbox-submit.1.gz share/man/man1/taskbox-config.1.gz \
         share/man/man5/taskbox-config.5.gz share/doc/taskbox/changelog.gz \
         share/bash-completion/completions/taskbox share/zsh/site-functions/_taskbox; do
  if [ -e "$prefix/$f" ]; then ok; else bad "not installed: $f"; fi
done

# the unit starts this prefix's taskbox; nothing is written outside it
if grep -qx "ExecStart=$prefix/bin/taskbox worker --config /etc/taskbox/worker.json" \
     "$prefix/lib/systemd/system/taskbox-worker.service"; then ok; else
  bad "the installed unit's ExecStart: $(grep ExecStart= "$prefix/lib/systemd/system/taskbox-worker.service")"; fi
# every command has its page, and the pages render without a warning
for c in $("$prefix/bin/taskbox" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p'); do
  if zgrep -q "^\.TH TASKBOX-$(printf '%s' "$c" | tr a-z A-Z) 1" "$prefix/share/man/man1/taskbox-$c.1.gz" 2>/dev/null
  then ok; else bad "no man page for taskbox $c"; fi
done
if command -v man >/dev/null; then
  warn=$(MANWIDTH=80 man --warnings -l "$prefix"/share/man/man1/*.1.gz \
    "$prefix"/share/man/man5/*.5.gz 2>&1 >/dev/null)
  if [ -z "$warn" ]; then ok; else bad "man pages warn: $warn"; fi
fi
# bash completes the commands and each command's options
complete_words() { # complete_words WORD... : what bash offers for the last word
  bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _taskbox; echo "${COMPREPLY[*]}"' \
    sh "$prefix/share/bash-completion/completions/taskbox" "$@"
}
if [ "$(complete_words taskbox wor)" = worker ]; then ok; else bad "completion of 'taskbox wor'"; fi
if complete_words taskbox submit --re | grep -qw -- --recipe; then ok; else
  bad "completion of 'taskbox submit --re': $(complete_words taskbox submit --re)"; fi
# ... from the parser's own tables: short forms, a verb's own options,
# files after a value, nothing after a number
if complete_words taskbox submit - | grep -qw -- -i; then ok; else
  bad "completion of 'taskbox submit -': $(complete_words taskbox submit -)"; fi
if [ "$(complete_words taskbox config s)" = show ]; then ok; else
  bad "completion of 'taskbox config s': $(complete_words taskbox config s)"; fi
if [ "$(complete_words taskbox config show --j)" = --json ]; then ok; else
  bad "completion of 'taskbox config show --j': $(complete_words taskbox config show --j)"; fi
if [ "$(complete_words taskbox config check --j)" = "" ]; then ok; else
  bad "'config check' offers show's --json: $(complete_words taskbox config check --j)"; fi
if [ "$(complete_words taskbox artifacts g)" = get ]; then ok; else
  bad "completion of 'taskbox artifacts g': $(complete_words taskbox artifacts g)"; fi
if [ "$(complete_words taskbox artifacts get --ou)" = --output ]; then ok; else
  bad "completion of 'taskbox artifacts get --ou': $(complete_words taskbox artifacts get --ou)"; fi
if [ "$(complete_words taskbox artifacts list --ou)" = "" ]; then ok; else
  bad "'artifacts list' offers get's --output: $(complete_words taskbox artifacts list --ou)"; fi
if [ "$(cd "$tmp" && complete_words taskbox worker -c install.l)" = install.log ]; then ok; else
  bad "no file completed after -c: $(cd "$tmp" && complete_words taskbox worker -c install.l)"; fi
if [ "$(cd "$tmp" && complete_words taskbox top --interval i)" = "" ]; then ok; else
  bad "files offered after a number: $(cd "$tmp" && complete_words taskbox top --interval i)"; fi

# The installed tree alone: source and build out of reach (a private
# mount namespace: nothing of it reaches the host's mounts).
unshare -m --propagation private sh -c '
  mount -t tmpfs none "$1" && mount -t tmpfs none "$2" || exit 99
  cd / && "$3/bin/taskbox" --version && "$3/bin/taskbox" demo
' sh "$build" "$root" "$prefix" >"$tmp/run.log" 2>&1
rc=$?
if [ "$rc" = 0 ]; then ok; else bad "the installed demo, trees hidden: exit $rc"; tail -30 "$tmp/run.log"; fi
if grep -q "^taskbox [0-9]" "$tmp/run.log"; then ok; else bad "--version from the installed tree"; fi
if grep -q "succeeded" "$tmp/run.log"; then ok; else bad "the demo's tasks succeeded"; tail -30 "$tmp/run.log"; fi

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
