#!/usr/bin/env bash
# The Python package's types: mypy --strict finds nothing in the package
# and its build backend (pyproject.toml's [tool.mypy]), with the mypy of
# the python3 under test. Exits 77 when that python3 has no mypy
# (tests/run installs it: Debian's mypy, else pip's).
# Usage: test_typing.sh SOURCE_DIR
set -u
root=$1
py=${PYTHON:-python3}
if ! "$py" -m mypy --version >/dev/null 2>&1; then
  echo "skipped: $py has no mypy (apt-get install mypy, or pip install mypy)"
  exit 77
fi
tmp=$(mktemp -d /tmp/tb-pymypy-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$root/clients/python" || exit 1
"$py" -m mypy --version
if "$py" -m mypy --strict --cache-dir "$tmp/cache" taskbox build_backend/taskbox_build.py; then
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"
  exit 1
fi
