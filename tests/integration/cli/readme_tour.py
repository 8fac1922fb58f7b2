#!/usr/bin/env python3
"""The README's five-minute tour, run as it is written: its two shell
blocks (the services, a worker on examples/worker.json, the hello recipe
committed to a repository of its own; then submit, watch, status,
artifacts get and view) in one bash with -e, from the source tree. Only
names change: /tmp/hello and /tmp/tour become this run's own directory,
`taskbox` is the command under test (first on PATH), and the worker's
topics, group, ledger prefix, work and cache directories and metrics
port are this run's (TASKBOX_* variables, which win over the file), so
that the shared services and other tests are not disturbed; `taskbox
view` listens on a free port, is asked for its page, and is stopped.

Exits 77 without root (the worker builds sandboxes) or without the
services' variables (tests/run sets them).
Usage: readme_tour.py TASKBOX SOURCE_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys

NEEDED = ("TASKBOX_TEST_KAFKA", "TASKBOX_TEST_REDIS")


def tour(readme):
    """The tour's shell blocks, in order."""
    m = re.search(r"^## A five-minute tour\n(.*?)^## ", readme, re.S | re.M)
    assert m, "README.md has no '## A five-minute tour' section"
    sh = re.findall(r"```sh\n(.*?)```", m.group(1), re.S)
    assert len(sh) == 2, f"the tour has {len(sh)} sh blocks, not 2"
    return sh


def main():
    if os.geteuid() != 0:
        print("skipped: the worker builds sandboxes, as root")
        return 77
    missing = [v for v in NEEDED if not os.environ.get(v)]
    if missing:
        print(f"skipped: {', '.join(missing)} not set (tests/run starts the services)")
        return 77
    tb, root = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
    run = f"tbreadme-{os.getpid()}"
    here = f"/tmp/{run}"
    os.makedirs(here, mode=0o711)
    os.chmod(here, 0o711)  # the sandbox reaches work_dir through it as no owner
    bindir = os.path.join(here, "bin")
    os.makedirs(bindir)
    os.symlink(tb, os.path.join(bindir, "taskbox"))

    setup, look = tour(open(os.path.join(root, "README.md")).read())
    script = (setup + look).replace("/tmp/hello", f"{here}/hello").replace(
        "/tmp/tour", f"{here}/tour")
    # view: on a free port, its page fetched once, then stopped
    view = re.search(r"^taskbox view\b.*$", script, re.M)
    assert view, "the tour runs no `taskbox view`"
    script = script.replace(view.group(0), f"""\
taskbox view --listen 127.0.0.1:0 >{here}/view.out 2>&1 & view=$!
for i in $(seq 50); do url=$(grep -o 'http://[^ ]*' {here}/view.out || true); [ -n "$url" ] && break; sleep 0.2; done
curl -sf "$url" | grep -q '<html' && echo "view: its page at $url"
kill $view""")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}",
               TASKBOX_KAFKA_BROKERS=os.environ["TASKBOX_TEST_KAFKA"],
               TASKBOX_LEDGER_URL=os.environ["TASKBOX_TEST_REDIS"],
               TASKBOX_KAFKA_TASKS_TOPIC=f"{run}.tasks",
               TASKBOX_KAFKA_EVENTS_TOPIC=f"{run}.events",
               TASKBOX_KAFKA_DLQ_TOPIC=f"{run}.dlq", TASKBOX_KAFKA_GROUP=run,
               TASKBOX_LEDGER_PREFIX=run, TASKBOX_WORK_DIR=f"{here}/work",
               TASKBOX_CACHE_DIR=f"{here}/cache", TASKBOX_METRICS_LISTEN="")
    env.pop("TASKBOX_CONFIG", None)
    prelude = (f"deploy/local/services topic {run}.tasks:2 {run}.events:2 {run}.dlq:1 >/dev/null\n"
               f"trap 'kill %1 2>/dev/null; wait %1 2>/dev/null' EXIT\n")
    print("--- the tour, its names made this run's\n" + script)
    p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", prelude + script], cwd=root,
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
    print("--- its output\n" + out)
    fails = []
    if p.returncode != 0:
        fails.append(f"the tour exited {p.returncode}")
    for promise in ("phase acknowledged", ": succeeded (attempt 1)", "outcome   succeeded",
                    "hello.txt (", "sha256 ", "view: its page at"):
        if promise not in out:
            fails.append(f"no {promise!r} in its output")
    try:
        with open(f"{here}/hello.txt") as f:
            if not f.read().startswith("hello, queue!"):
                fails.append("hello.txt is not the greeting")
    except OSError as e:
        fails.append(f"artifacts get wrote no file: {e}")
    if not fails:
        shutil.rmtree(here, ignore_errors=True)
    for f in fails:
        print(f"FAIL {f}")
    print(f"readme tour: {'ok' if not fails else f'{len(fails)} failures; kept {here}'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
