#!/usr/bin/env bash
# The Python package as a user installs it: `pip install clients/python`
# into a fresh virtual environment, offline (--no-index: nothing but the
# tree and the dependencies already installed), then imported from
# elsewhere: its version is what `taskbox --version` prints, and it
# carries py.typed (test_typing.sh checks the types themselves).
# Usage: test_package.sh TASKBOX SOURCE_DIR
set -u
tb=$1 root=$2
py=${PYTHON:-python3}
tmp=$(mktemp -d /tmp/tb-pypkg-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL $*"; fail=1; }

"$py" -m venv --system-site-packages --without-pip "$tmp/venv" || { bad "venv"; exit 1; }
# pip from outside the venv, aimed at it (--python): no network for pip either
if ! "$py" -m pip --python "$tmp/venv/bin/python" install --no-index --disable-pip-version-check \
  --quiet "$root/clients/python" >"$tmp/pip.out" 2>&1; then
  bad "pip install clients/python offline"; cat "$tmp/pip.out"
fi
got=$(cd "$tmp" && "$tmp/venv/bin/python" -c 'import taskbox; print(taskbox.__version__)')
want=$("$tb" --version | head -1 | cut -d' ' -f2)
if [ -n "$want" ] && [ "$got" = "$want" ]; then echo "ok   version $got"; else
  bad "taskbox.__version__ '$got', taskbox --version '$want'"; fi
where=$(cd "$tmp" && "$tmp/venv/bin/python" -c 'import os, taskbox; print(os.path.dirname(taskbox.__file__))')
case $where in "$tmp"/venv/*) echo "ok   installed in the venv" ;; *) bad "imported from $where" ;; esac
if [ -f "$where/py.typed" ]; then echo "ok   py.typed"; else bad "no py.typed in $where"; fi
exit $fail
