#!/usr/bin/env python3
"""The Python package's store and uploads on this machine alone (no
services): what needs no Kafka, Redis or S3 server.

- ``client.upload`` into a ``dir://`` store writes the very files
  `taskbox artifacts put` writes for the same tree (objects, block
  lists and their .meta records, byte for byte), names them alike, and
  skips what is there; ``name=`` names them as `submit --input
  NAME=@PATH`; symbolic links are skipped with a warning;
- the CRC-32C: the check value, the C package's (if any) against the
  table, and the store's records;
- a download is checked against the manifest's SHA-256 and the store's
  record, and leaves nothing when they disagree;
- SigV4 query-string signing against a URL worked by hand from keys.md;
- the errors: a path that is not there, a share of a dir:// store, a
  share's lifetime, submit's arguments (replay_from with a recipe, a
  missing prompt), a bad DLQ place;
- following a task whose ledger cannot be asked: its acknowledged
  attempt settles it on its events once the ledger's patience is out.

Usage: test_local.py TASKBOX
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import logging
import os
import pathlib
import subprocess
import sys
import tempfile
import traceback
import urllib.parse
from typing import Any, Callable, List

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import taskbox  # noqa: E402
from taskbox import checksums  # noqa: E402
from taskbox.store import Store, presign_v4  # noqa: E402


class Run:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: List[str] = []

    def check(self, what: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception:
            self.failed.append(what)
            print(f"FAIL {what}")
            traceback.print_exc()
        else:
            self.passed += 1
            print(f"ok   {what}")
        sys.stdout.flush()


def tree(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def main() -> int:
    tb = sys.argv[1]
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tb-pylocal-"))
    src = tmp / "src"
    (src / "data" / "sub").mkdir(parents=True)
    (src / "data" / ".hidden").mkdir()
    (src / "notes.txt").write_text("uploaded words\n")
    (src / "data" / "a.csv").write_text("a,b\n1,2\n")
    (src / "data" / "empty").write_bytes(b"")
    (src / "data" / "sub" / "blocks.bin").write_bytes(os.urandom(2621440))  # 2.5 blocks
    (src / "data" / ".hidden" / "h").write_text("h")
    (src / "data" / "B-upper").write_text("upper")  # byte order: before a.csv
    (src / "data" / "link").symlink_to("../notes.txt")
    cfgs = {}
    for who in ("cli", "py"):
        cfgs[who] = tmp / f"{who}.json"
        cfgs[who].write_text(json.dumps({"v": 1, "store": {"url": f"dir://{tmp}/{who}"}}))
    r = Run()

    def same_files_as_the_command() -> None:
        out = subprocess.run([tb, "artifacts", "put", "--config", str(cfgs["cli"]), "--json",
                              str(src / "notes.txt"), str(src / "data")],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "link skipped" in out.stderr, out.stderr
        cli = json.loads(out.stdout)
        client = taskbox.Client(taskbox.Config(brokers="127.0.0.1:1",
                                               store_url=f"dir://{tmp}/py"))
        seen: list[str] = []
        with Captured() as warned:
            got = client.upload(src / "notes.txt") + client.upload(
                str(src / "data") + "/", on_file=lambda u: seen.append(u.name))
        assert any("data/link skipped" in w for w in warned.lines), warned.lines
        mine = [{"path": u.name, "key": u.key, "sha256": u.sha256, "blocks": u.blocks,
                 "size": u.size, "uploaded": u.uploaded} for u in got]
        assert mine == cli, (mine, cli)
        assert seen == [u.name for u in got[1:]], seen
        assert [u.name for u in got] == ["notes.txt", "data/.hidden/h", "data/B-upper",
                                         "data/a.csv", "data/empty", "data/sub/blocks.bin"]
        assert tree(tmp / "py") == tree(tmp / "cli"), "the stores differ"
        assert len(tree(tmp / "py")) == 4 * 6, sorted(tree(tmp / "py"))  # objects, lists, .meta
        again = client.upload(src / "data")
        assert [u.uploaded for u in again] == [False] * 5, again
        told: list[str] = []
        named = client.upload(src / "data", name="in", on_file=lambda u: told.append(u.name))
        assert [u.input()["name"] for u in named][:2] == ["in/.hidden/h", "in/B-upper"], named
        assert told == [u.name for u in named], told  # each as it goes, by its given name
        one = client.upload(src / "notes.txt", name="words.txt")[0]
        assert one.input() == {"name": "words.txt", "artifact": one.key, "sha256": one.sha256,
                               "blocks": one.blocks}, one.input()
        # the block list is what keys.md says
        data = (src / "data/sub/blocks.bin").read_bytes()
        want = b"".join(hashlib.sha256(data[i:i + 1048576]).digest()
                        for i in range(0, len(data), 1048576))
        assert (tmp / "py/blocks" / hashlib.sha256(data).hexdigest()).read_bytes() == want
    r.check("upload writes what `taskbox artifacts put` writes, byte for byte", same_files_as_the_command)

    def crc32c() -> None:
        assert checksums.crc32c(b"123456789") == 0xE3069283
        assert checksums._crc32c_python(b"123456789") == 0xE3069283
        data = os.urandom(100003)
        assert checksums.crc32c(data) == checksums._crc32c_python(data)
        assert checksums.crc32c(data[5000:], checksums.crc32c(data[:5000])) == \
            checksums.crc32c(data)
        meta = (tmp / "py/.meta/uploads" / hashlib.sha256(b"uploaded words\n").hexdigest())
        sha, size, crc = meta.read_text().split()
        assert crc == f"{checksums._crc32c_python(b'uploaded words' + bytes([10])):08x}", crc
        print(f"     (the CRC-32C from {checksums.FAST or 'the pure-Python table'})")
    r.check("CRC-32C: the check value, fast and table alike, as the store records it", crc32c)

    def downloads_checked() -> None:
        st = Store(taskbox.Config(store_url=f"dir://{tmp}/py"))
        sha = hashlib.sha256(b"uploaded words\n").hexdigest()
        key = f"uploads/{sha}"
        out = tmp / "got.txt"
        st.download(key, str(out), sha)
        assert out.read_text() == "uploaded words\n"
        with st.open(key) as f:
            assert f.read() == b"uploaded words\n"
        try:
            st.download(key, str(tmp / "bad.txt"), "0" * 64)
        except taskbox.ChecksumMismatch as e:
            assert "the manifest says 0000" in str(e), e
        else:
            raise AssertionError("a download against another SHA-256 was kept")
        assert not list(tmp.glob("bad.txt*")), list(tmp.glob("bad.txt*"))
        (tmp / "py" / key).chmod(0o644)
        (tmp / "py" / key).write_text("uploaded wordz\n")  # behind the store's back
        try:
            st.get(key, 100)
        except taskbox.ChecksumMismatch as e:
            assert "checksum mismatch for " + key in str(e), e
        else:
            raise AssertionError("changed bytes were read as good")
        try:
            st.get("uploads/nope", 10)
        except taskbox.NotFound as e:
            assert "no object uploads/nope" in str(e) and isinstance(e, LookupError), e
        else:
            raise AssertionError("a missing object was found")
    r.check("downloads are checked, and a refused one leaves nothing", downloads_checked)

    def presign() -> None:
        when = datetime.datetime(2026, 12, 5, 7, 1, 32, tzinfo=datetime.timezone.utc)
        url = presign_v4("AKID", "secret/key", None, "eu-west-1", "http://127.0.0.1:18333/",
                         "bucket", "pre/tasks/t-1/1/outputs/a b+c.txt", 60, when)
        base, _, query = url.partition("?")
        assert base == "http://127.0.0.1:18333/bucket/pre/tasks/t-1/1/outputs/a%20b%2Bc.txt", base
        pairs = [p.split("=", 1) for p in query.split("&")]
        assert [n for n, _ in pairs] == ["X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date",
                                         "X-Amz-Expires", "X-Amz-SignedHeaders",
                                         "X-Amz-Signature"], pairs
        got = dict(pairs)
        assert got["X-Amz-Credential"] == "AKID%2F20261205%2Feu-west-1%2Fs3%2Faws4_request"
        # keys.md's recipe, worked by hand
        unsigned = query.rpartition("&X-Amz-Signature=")[0]
        canonical = (f"GET\n{urllib.parse.urlsplit(base).path}\n{unsigned}\nhost:127.0.0.1:18333"
                     "\n\nhost\nUNSIGNED-PAYLOAD")
        sts = ("AWS4-HMAC-SHA256\n20261205T070132Z\n20261205/eu-west-1/s3/aws4_request\n"
               + hashlib.sha256(canonical.encode()).hexdigest())
        k = hmac.new(b"AWS4secret/key", b"20261205", hashlib.sha256).digest()
        for part in (b"eu-west-1", b"s3", b"aws4_request"):
            k = hmac.new(k, part, hashlib.sha256).digest()
        assert got["X-Amz-Signature"] == hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        tok = presign_v4("AKID", "s", "to/ken=", "us-east-1", None, "bkt", "k", 5, when)
        assert tok.startswith("https://bkt.s3.us-east-1.amazonaws.com/k?"), tok
        assert "&X-Amz-Expires=5&X-Amz-Security-Token=to%2Fken%3D&X-Amz-SignedHeaders=host&" in tok
    r.check("share URLs are signed as keys.md says", presign)

    def errors() -> None:
        client = taskbox.Client(taskbox.Config(brokers="127.0.0.1:1",
                                               store_url=f"dir://{tmp}/py"))
        cases: list[tuple[Callable[[], Any], type, str]] = [
            (lambda: client.upload(tmp / "none"), taskbox.UploadError,
             "none: no such file or directory"),
            (lambda: client.upload("/dev/null"), taskbox.UploadError,
             "not a regular file or a directory"),
            (lambda: client.store().share("uploads/x", 60), taskbox.StoreError,
             "a local directory cannot sign a URL"),
            (lambda: client.store().share("uploads/x", 0), taskbox.UsageError,
             "a share lasts 1 to 604800 seconds, not 0"),
            (lambda: client.submit(replay_from="t-1", recipe="x"), taskbox.UsageError,
             "recipe cannot go with it"),
            (lambda: client.submit(recipe="x", commit="a" * 40), taskbox.UsageError,
             "prompt needed"),
            (lambda: client.submit(recipe="x", commit="a" * 40, prompt="p", replay_mode="fill"),
             taskbox.UsageError, "go with replay_from"),
            (lambda: client.submit(replay_from="t-1"), taskbox.ConfigError,
             "replay_from needs the fleet's Redis"),
            (lambda: client.submit(replay_from="-t"), taskbox.InvalidMessage,
             "field 'replay_from'"),
            (lambda: client.send_back("3"), taskbox.UsageError, "PARTITION:OFFSET"),
            (lambda: client.task("t-1").artifacts(), taskbox.ConfigError, "a task's record"),
        ]
        for fn, kind, words in cases:
            try:
                fn()
            except kind as e:
                assert words in str(e), (words, str(e))
                assert isinstance(e, taskbox.TaskboxError)
            else:
                raise AssertionError(f"no {kind.__name__} ({words})")
    r.check("each error says what went wrong", errors)

    def settled_on_events_when_the_ledger_is_away() -> None:
        # as follow.c: an acknowledged attempt waits LEDGER_PATIENCE_S for
        # a ledger that cannot be asked, then its events settle the task
        from taskbox import events
        from taskbox.errors import LedgerError
        from taskbox.ledger import Done

        class Away:
            def done(self, task: str) -> None:
                raise LedgerError("ledger redis://127.0.0.1:1 unreachable: refused")

        class DoneBy:
            def __init__(self, attempt: int) -> None:
                self.attempt = attempt

            def done(self, task: str) -> Done:
                return Done(self.attempt, "tasks/t-1/2/manifest.msgpack")

        saved = events.LEDGER_PATIENCE_S
        events.LEDGER_PATIENCE_S = 0.2
        try:
            f = events.Follower(cfg=None, task_id="t-1", since_ms=0,  # type: ignore[arg-type]
                                ledger=Away())  # type: ignore[arg-type]
            a = f.attempts.setdefault(1, events._Attempt())
            a.result, a.acknowledged = {"outcome": "succeeded", "manifest_key": "k"}, True
            f._confirm(1, a)
            assert f.settled is None, "settled before the ledger's patience ran out"
            with Captured() as c:
                for _ in range(50):  # bounded: 50 x 0.05 s
                    f._asked_at = 0.0  # as if a second had passed
                    f._confirm_again()
                    if f.settled:
                        break
                    import time
                    time.sleep(0.05)
            assert f.settled is not None and f.settled.outcome == "succeeded", f.settled
            assert any("settled by its events alone" in x for x in c.lines), c.lines
            # a ledger that answers still decides: another attempt is done
            g = events.Follower(cfg=None, task_id="t-1", since_ms=0,  # type: ignore[arg-type]
                                ledger=DoneBy(2))  # type: ignore[arg-type]
            b = g.attempts.setdefault(1, events._Attempt())
            b.result, b.acknowledged = {"outcome": "failed"}, True
            g._confirm(1, b)
            assert g.settled is None, g.settled
        finally:
            events.LEDGER_PATIENCE_S = saved
    r.check("a ledger that cannot be asked: the events settle the task after its patience",
            settled_on_events_when_the_ledger_is_away)

    print(f"{r.passed} passed, {len(r.failed)} failed")
    if r.failed:
        print(f"files kept in {tmp}")
        return 1
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


class Captured(logging.Handler):
    """The taskbox logger's records while in a ``with``."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> "Captured":
        logging.getLogger("taskbox").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("taskbox").removeHandler(self)


if __name__ == "__main__":
    sys.exit(main())
