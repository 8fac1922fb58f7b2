#!/usr/bin/env python3
"""docs/python.md's five-minute tour, run as it is written: its shell
block (the services, topics, bucket, recipes, configuration and a
worker), then every Python block of the page in order, in one
interpreter. Only names are changed: "tour" (the topics, bucket, ledger
prefix, group and /tmp/tour) becomes this run's own, and
build/worker/taskbox the command under test. The tour's output is
printed, and a few of the results its comments promise are checked.

Exits 77 when the services' variables are missing (tests/run sets them).
Usage: test_tour.py TASKBOX SOURCE_DIR
"""
from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import traceback

NEEDED = ("TASKBOX_TEST_KAFKA", "TASKBOX_TEST_REDIS", "TASKBOX_TEST_S3_ENDPOINT",
          "TASKBOX_TEST_S3_ACCESS_KEY", "TASKBOX_TEST_S3_SECRET_KEY", "TASKBOX_TEST_S3_REGION")
PROMISED = ["succeeded", "wrote-greeting pass 1.0", "('notes.txt', True)", "hello.txt",
            "/tmp/tour/out/hello.txt", "True", "turn 1: you said first",
            "the session ended: ended by its producer", "dead-lettered", "poison",
            "unknown runtime 'later'", "names no egress recording",
            "['succeeded', 'succeeded']", "recipe.commit"]


def blocks(page: str) -> "tuple[str, list[str]]":
    """The tour's shell block and every Python block of the page."""
    tour = page[page.index("## The five-minute tour"):page.index("## The calls")]
    sh = re.findall(r"```sh\n(.*?)```", tour, re.S)
    py = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(sh) == 1 and len(py) >= 6, (len(sh), len(py))
    return sh[0], py


def main() -> int:
    missing = [v for v in NEEDED if not os.environ.get(v)]
    if missing:
        print(f"skipped: {', '.join(missing)} not set (tests/run starts the services)")
        return 77
    tb, root = sys.argv[1], pathlib.Path(sys.argv[2]).resolve()
    run = f"tbtour-{os.getpid()}"
    here = pathlib.Path(f"/tmp/{run}")

    def ours(text: str) -> str:
        text = re.sub(r"(?<![A-Za-z])tour(?![A-Za-z])", run, text)
        return text.replace("build/worker/taskbox", tb)

    sh, py = blocks((root / "docs" / "python.md").read_text())
    script = ours(sh) + f"\necho $! >{here}/worker.pid\n"
    print("--- the shell block\n" + script)
    setup = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=root, timeout=300)
    if setup.returncode != 0:
        print(f"FAIL the shell block exited {setup.returncode}")
        return 1
    os.environ["TASKBOX_CONFIG"] = f"{here}/config.json"
    os.environ["AWS_ACCESS_KEY_ID"] = os.environ["TASKBOX_TEST_S3_ACCESS_KEY"]
    os.environ["AWS_SECRET_ACCESS_KEY"] = os.environ["TASKBOX_TEST_S3_SECRET_KEY"]
    sys.path.insert(0, str(root / "clients" / "python"))
    out = io.StringIO()
    ok = True
    ns: dict[str, object] = {"__name__": "__tour__"}
    try:
        for i, code in enumerate(py, 1):
            print(f"--- Python block {i}\n{ours(code)}")
            with contextlib.redirect_stdout(out):
                exec(compile(ours(code), f"docs/python.md block {i}", "exec"), ns)
            print(out.getvalue()[-3000:] if i == len(py) else "", end="")
    except Exception:
        ok = False
        traceback.print_exc()
    finally:
        try:
            os.kill(int((here / "worker.pid").read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
    said = out.getvalue()
    print("--- what the tour printed\n" + said)
    for want in PROMISED:
        if ours(want) not in said:
            print(f"FAIL the tour did not print {want!r}")
            ok = False
    print(f"{1 if ok else 0} passed, {0 if ok else 1} failed")
    if ok:
        shutil.rmtree(here, ignore_errors=True)
    else:
        print(f"files kept in {here}; the worker's log:")
        print((here / "worker.log").read_text()[-3000:] if (here / "worker.log").exists() else "")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
