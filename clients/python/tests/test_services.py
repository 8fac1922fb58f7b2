#!/usr/bin/env python3
"""The Python package against the real services and a real worker, as a
producer uses it (the approach of tests/integration/cli/cli_services.sh:
topics, bucket, ledger prefix and group of this run's own, a `taskbox
worker` with a configuration naming them, the example recipes in
repositories of our own, pinned):

- a one-shot task submitted from Python runs, its events come in order
  and its result is awaited from Python: outcome, verdicts, usage, the
  manifest; `taskbox watch` follows the same task to the same outcome;
- a task submitted with `taskbox submit` is followed from Python, and a
  task id both sent lands on one partition (librdkafka's partitioner on
  both sides);
- an interactive task gets follow-ups and an end from Python (numbered
  by the ledger, as `taskbox send` numbers them), each answered in turn;
- a task refused before sending, naming the field; a wait that times out;
- uploads: the same keys, metadata and block lists as `taskbox artifacts
  put` (a multipart one among them), nothing sent again; a file and a
  directory given to a task as inputs, which reads them;
- artifacts: listed, downloaded, read, the record's own objects; a share
  URL equal to the command's for the same second, which downloads; a
  file replaced behind the store refused against the manifest;
- replay: a recorded run replayed from Python, its provider not asked
  again; a task that recorded nothing refused;
- the DLQ: a dead letter read, sent back after the fix, and succeeding;
  one that holds no task, and one done, refused;
- asyncio: events and the result awaited, and an early exit that stops
  the reading thread.

Exits 77 when the services' variables are missing (tests/run sets them).
Usage: test_services.py TASKBOX SOURCE_DIR
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, List

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import taskbox  # noqa: E402

NEEDED = ("TASKBOX_TEST_KAFKA", "TASKBOX_TEST_REDIS", "TASKBOX_TEST_S3_ENDPOINT",
          "TASKBOX_TEST_S3_ACCESS_KEY", "TASKBOX_TEST_S3_SECRET_KEY", "TASKBOX_TEST_S3_REGION")
WAIT_S = 180  # at most, for any one task


# An agent that reads its inputs into an output (and greets, for the
# hello recipe's judges).
READS_AGENT = """read -r prompt
cat /inputs/notes.txt /inputs/more/a.txt /inputs/more/sub/b.txt > /outputs/notes.txt
echo "hello, inputs" > /outputs/hello.txt
"""
# An agent that asks its provider (through the egress proxy) and keeps
# the answer.
ASKS_AGENT = """read -r prompt
curl -s -H "X-Taskbox-Token: $TASKBOX_TOKEN" -d '{"q":1}' "$TASKBOX_ENDPOINT_LLM/v1/chat" \
  > /outputs/answer.json
echo hello > /outputs/hello.txt
"""


class Provider:
    """A model provider of our own on loopback: answers every POST the
    same, and counts them."""

    def __init__(self) -> None:
        import http.server
        import threading

        asked: List[str] = []
        self.asked = asked

        class Answer(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                asked.append(self.path)
                body = b'{"answer":"forty-two","usage":{"prompt_tokens":3,"completion_tokens":2}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Ctx:
    tb: str
    cfg: str
    tmp: pathlib.Path
    root: pathlib.Path
    s3: Any
    run_id: str
    hello_url: str
    hello: str
    chat_url: str
    chat: str
    reads_url: str
    reads: str
    asks_url: str
    asks: str
    provider: Provider


def git_recipe(root: pathlib.Path, name: str, into: pathlib.Path, agent: str = "") -> str:
    """The example recipe ``name`` in a repository of its own (``agent``:
    its agent.sh instead); its commit."""
    shutil.copytree(root / "examples" / "recipes" / name, into)
    if agent:
        (into / "agent.sh").write_text(agent)
    run = lambda *a: subprocess.run(["git", "-C", str(into), *a], check=True,  # noqa: E731
                                    capture_output=True, timeout=60)
    run("init", "-q")
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", name)
    return subprocess.run(["git", "-C", str(into), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


class Run:
    def __init__(self) -> None:
        self.passed = 0
        self.failed: List[str] = []

    def check(self, what: str, fn: Callable[[], Any]) -> None:
        t0 = time.monotonic()
        try:
            fn()
        except Exception:  # a failed check is reported, and the rest go on
            self.failed.append(what)
            print(f"FAIL {what}")
            traceback.print_exc()
        else:
            self.passed += 1
            print(f"ok   {what} ({time.monotonic() - t0:.1f} s)")
        sys.stdout.flush()


def main() -> int:
    missing = [v for v in NEEDED if not os.environ.get(v)]
    if missing:
        print(f"skipped: {', '.join(missing)} not set (tests/run starts the services)")
        return 77
    tb, root = sys.argv[1], pathlib.Path(sys.argv[2])
    env = os.environ
    run_id = f"tbpy-{os.getpid()}"
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tb-py-", dir="/tmp"))
    tmp.chmod(0o711)  # the sandboxes' users pass through to their work dirs
    os.environ["AWS_ACCESS_KEY_ID"] = env["TASKBOX_TEST_S3_ACCESS_KEY"]
    os.environ["AWS_SECRET_ACCESS_KEY"] = env["TASKBOX_TEST_S3_SECRET_KEY"]
    subprocess.run([str(root / "deploy/local/services"), "topic", f"{run_id}.tasks:4",
                    f"{run_id}.events:4", f"{run_id}.dlq:1"], check=True, timeout=120)
    import botocore.session
    from botocore.config import Config as BotoConfig
    s3 = botocore.session.get_session().create_client(
        "s3", region_name=env["TASKBOX_TEST_S3_REGION"], endpoint_url=env["TASKBOX_TEST_S3_ENDPOINT"],
        config=BotoConfig(s3={"addressing_style": "path"}))
    for b in (run_id, f"{run_id}-cli", f"{run_id}-py"):
        s3.create_bucket(Bucket=b)

    hello = git_recipe(root, "hello", tmp / "hello")
    chat = git_recipe(root, "chat", tmp / "chat")
    reads = git_recipe(root, "hello", tmp / "reads", READS_AGENT)
    asks = git_recipe(root, "hello", tmp / "asks", ASKS_AGENT)
    provider = Provider()
    (tmp / "runtimes").mkdir()
    shutil.copy(root / "examples/runtimes/default.json", tmp / "runtimes")
    (tmp / "runtimes" / "recorded.json").write_text(json.dumps({
        "v": 1, "name": "recorded", "network": {"allow": [{
            "name": "llm", "host": "127.0.0.1", "port": provider.port, "scheme": "http",
            "dialect": "openai", "record": True}]}}))
    cfg_path = tmp / "worker.json"
    cfg_path.write_text(json.dumps({
        "v": 1, "worker_id": run_id, "slots": 2,
        "kafka": {"brokers": env["TASKBOX_TEST_KAFKA"], "group": run_id,
                  "tasks_topic": f"{run_id}.tasks", "events_topic": f"{run_id}.events",
                  "dlq_topic": f"{run_id}.dlq"},
        "ledger": {"url": env["TASKBOX_TEST_REDIS"], "prefix": run_id, "lease_ms": 6000},
        "store": {"url": f"s3://{run_id}", "endpoint": env["TASKBOX_TEST_S3_ENDPOINT"],
                  "region": env["TASKBOX_TEST_S3_REGION"]},
        "runtimes_dir": str(tmp / "runtimes"), "work_dir": str(tmp / "work"),
        "cache_dir": str(tmp / "cache"),
    }))
    log = open(tmp / "worker.log", "wb")
    worker = subprocess.Popen([tb, "worker", "--config", str(cfg_path)], stdout=log,
                              stderr=subprocess.STDOUT)
    for who in ("cli", "py"):  # stores of their own, for the uploads compared
        (tmp / f"{who}.json").write_text(json.dumps({
            "v": 1, "store": {"url": f"s3://{run_id}-{who}/pre",
                              "endpoint": env["TASKBOX_TEST_S3_ENDPOINT"],
                              "region": env["TASKBOX_TEST_S3_REGION"]}}))
    r = Run()
    ctx = Ctx(tb=tb, cfg=str(cfg_path), tmp=tmp, root=root, s3=s3, run_id=run_id,
              hello_url=f"file://{tmp}/hello", hello=hello, chat_url=f"file://{tmp}/chat",
              chat=chat, reads_url=f"file://{tmp}/reads", reads=reads,
              asks_url=f"file://{tmp}/asks", asks=asks, provider=provider)
    try:
        tests(r, tb, str(cfg_path), f"file://{tmp}/hello", hello, f"file://{tmp}/chat", chat)
        more_tests(r, ctx)
    finally:
        provider.stop()
        worker.terminate()
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
    print(f"{r.passed} passed, {len(r.failed)} failed")
    if r.failed:
        print(f"files kept in {tmp}; the worker's log:")
        print((tmp / "worker.log").read_text()[-4000:])
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


def tests(r: Run, tb: str, cfg: str, hello_url: str, hello: str, chat_url: str, chat: str) -> None:
    client = taskbox.Client(cfg)
    state: dict[str, Any] = {}

    def one_shot() -> None:
        task = client.submit(recipe=hello_url, commit=hello, prompt="world",
                             labels={"team": "python"}, limits={"wall_seconds": 120})
        events = list(task.events(timeout=WAIT_S))
        by_attempt: dict[int, list[int]] = {}
        for e in events:
            assert e.task_id == task.id, e
            by_attempt.setdefault(e.attempt, []).append(e.seq)
        for seqs in by_attempt.values():
            assert seqs == list(range(len(seqs))), seqs  # in order, none twice
        kinds = [(e.type, e.payload.get("phase")) for e in events]
        assert kinds[0] == ("phase", "received") and kinds[-1] == ("phase", "acknowledged"), kinds
        assert any(e.type == "message" and str(e.payload.get("text")).startswith("hello, queue!")
                   and e.source == "agent" for e in events), events
        labelled = [e for e in events if e.type == "result"][0]
        assert labelled.payload.get("labels") == {"team": "python"}, labelled
        res = task.wait(timeout=10)  # settled already: at once
        assert res.succeeded and res.outcome == "succeeded", res
        assert res.attempt == 1 and res.task_id == task.id
        assert {(v.judge, v.outcome) for v in res.verdicts} == {
            ("wrote-greeting", "pass"), ("file-says-hello", "pass")}, res.verdicts
        assert res.usage.get("wall_ms", 0) > 0 and "agent" in res.usage, res.usage
        assert res.manifest is not None and res.manifest["outcome"] == "succeeded"
        assert any(a["path"] == "hello.txt" for a in res.manifest.get("artifacts", []))
        state["one_shot"] = task.id
    r.check("a one-shot task from Python runs, its events in order, its result awaited", one_shot)

    def watched_by_the_command() -> None:
        out = subprocess.run([tb, "watch", "--config", cfg, "--timeout", "60", state["one_shot"]],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"task {state['one_shot']}: succeeded (attempt 1)" in out.stdout, out.stdout
    r.check("taskbox watch follows the task Python submitted", watched_by_the_command)

    def wait_by_a_fresh_client() -> None:
        with taskbox.Client(cfg) as other:
            res = other.task(state["one_shot"]).wait(timeout=60)
        assert res.succeeded and len(res.verdicts) == 2, res
    r.check("another client awaits the same task by its id", wait_by_a_fresh_client)

    def submitted_by_the_command() -> None:
        out = subprocess.run([tb, "submit", "--config", cfg, "--recipe", hello_url, "--commit",
                              hello, "--prompt", "from the command", "--label", "by=cli"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        task = client.task(out.stdout.strip())
        prompts = []
        for e in task.events(timeout=WAIT_S):
            if e.type == "message" and e.payload.get("role") == "user" and e.source == "worker":
                prompts.append(e.payload["text"])
        assert prompts == ["from the command"], prompts
        res = task.wait()
        assert res.succeeded and res.verdicts and res.usage, res
    r.check("a task from `taskbox submit` is followed from Python", submitted_by_the_command)

    def same_partition() -> None:
        from confluent_kafka import Consumer, TopicPartition
        tid = taskbox.new_id()
        client.submit(recipe=hello_url, commit=hello, prompt="twice", id=tid)
        out = subprocess.run([tb, "submit", "--config", cfg, "--recipe", hello_url, "--commit",
                              hello, "--prompt", "twice", "--id", tid],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        c = Consumer({"bootstrap.servers": client.config.brokers, "group.id": f"p-{tid}",
                      "enable.auto.commit": False, "enable.partition.eof": True})
        topic = client.config.tasks_topic
        parts = list(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])  # OFFSET 0: every message
        found, ended, until = [], set(), time.monotonic() + 30
        while len(ended) < len(parts) and time.monotonic() < until:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                ended.add(m.partition())
            elif m.key() == tid.encode():
                found.append(m.partition())
        c.close()
        assert len(found) == 2 and found[0] == found[1], found
        # the same task twice: one run, one result
        assert client.task(tid).wait(timeout=WAIT_S).attempt == 1
    r.check("a task id from Python and from the command lands on one partition", same_partition)

    def interactive() -> None:
        task = client.submit(recipe=chat_url, commit=chat, prompt="first", kind="interactive")
        it = task.events(timeout=WAIT_S)
        answers: list[str] = []
        sent = []
        for e in it:
            if e.type == "message" and e.payload.get("role") == "assistant":
                answers.append(e.payload["text"])
            if e.type == "turn" and e.payload.get("state") == "turn-ended":
                if e.payload.get("turn") == 1:
                    sent.append(task.send("second"))
                elif e.payload.get("turn") == 2:
                    sent.append(task.send("third"))
                elif e.payload.get("turn") == 3:
                    sent.append(task.end())
        assert sent == [1, 2, 3], sent  # numbered by the ledger, as `taskbox send`
        assert answers[:3] == ["turn 1: you said first", "turn 2: you said second",
                               "turn 3: you said third"], answers
        res = task.wait()
        assert res.succeeded, res
        assert "ended by its producer" in res.reason, res.reason
        assert [(v.judge, v.outcome) for v in res.verdicts] == [("answered-every-turn", "pass")]
        assert res.manifest is not None and res.manifest.get("turns") == 3, res.manifest
    r.check("an interactive task gets follow-ups and an end from Python", interactive)

    def refused_before_sending() -> None:
        try:
            client.submit(recipe=hello_url, commit="abc123", prompt="x")
        except taskbox.InvalidMessage as e:
            assert e.field == "recipe.commit" and "40 lowercase hex" in str(e), e
        else:
            raise AssertionError("a short commit was taken")
        try:
            client.submit(recipe=hello_url, commit=hello, prompt="x", limits={"wall_secs": 5})
        except taskbox.InvalidMessage as e:
            assert "unknown key 'limits.wall_secs'" in str(e), e
        else:
            raise AssertionError("an unknown limit was taken")
    r.check("a bad task is refused before anything is sent, naming the field", refused_before_sending)

    def times_out() -> None:
        task = client.task(taskbox.new_id())  # nobody sent it
        t0 = time.monotonic()
        try:
            task.wait(timeout=3)
        except taskbox.TaskTimeout as e:
            assert "goes on" in str(e) and isinstance(e, TimeoutError), e
        else:
            raise AssertionError("a task nobody sent was settled")
        assert time.monotonic() - t0 < 20
    r.check("wait gives up at its timeout with TaskTimeout", times_out)
    client.close()


def heads(s3: Any, bucket: str, keys: List[str]) -> dict[str, Any]:
    """What the store says of each key: size, type, metadata, ETag."""
    out = {}
    for k in keys:
        h = s3.head_object(Bucket=bucket, Key=f"pre/{k}")
        out[k] = (h["ContentLength"], h.get("ContentType"), h["Metadata"], h["ETag"])
    return out


def more_tests(r: Run, c: Ctx) -> None:
    client = taskbox.Client(c.cfg)
    src = c.tmp / "src"
    (src / "more" / "sub").mkdir(parents=True)
    (src / "notes.txt").write_text("uploaded words\n")
    (src / "more" / "a.txt").write_text("from a directory\n")
    (src / "more" / "sub" / "b.txt").write_text("and below it\n")
    (src / "more" / "sub" / "blocks.bin").write_bytes(os.urandom(2621440))
    (src / "huge.bin").write_bytes(os.urandom((64 << 20) + 12345))  # in parts
    state: dict[str, Any] = {}

    def uploads_as_the_command() -> None:
        paths = [str(src / "notes.txt"), str(src / "more"), str(src / "huge.bin")]
        out = subprocess.run([c.tb, "artifacts", "put", "--config", str(c.tmp / "cli.json"),
                              "--json", *paths], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        cli = json.loads(out.stdout)
        mine = taskbox.Client(str(c.tmp / "py.json"))  # a store alone: no Kafka needed
        got = [u for p in paths for u in mine.upload(p)]
        assert [{"path": u.name, "key": u.key, "sha256": u.sha256, "blocks": u.blocks,
                 "size": u.size, "uploaded": u.uploaded} for u in got] == cli, (got, cli)
        keys = [k for u in got for k in (u.key, f"blocks/{u.sha256}")]
        py, cmd = heads(c.s3, f"{c.run_id}-py", keys), heads(c.s3, f"{c.run_id}-cli", keys)
        assert py == cmd, (py, cmd)
        big = py[f"uploads/{got[-1].sha256}"]
        assert big[3].endswith('-5"'), big  # sent in 16 MiB parts, as the command sends it
        assert all(set(h[2]) == {"sha256", "crc32c"} for h in py.values()), py
        assert not any(u.uploaded for p in paths for u in mine.upload(p))  # there already
        theirs = taskbox.Client(str(c.tmp / "cli.json"))  # what the command put: skipped
        assert not any(u.uploaded for u in theirs.upload(src / "more"))
    r.check("upload puts what `taskbox artifacts put` puts: keys, metadata, parts", uploads_as_the_command)

    def inputs_read_by_a_task() -> None:
        ups = client.upload(src / "notes.txt") + client.upload(src / "more")
        assert [u.name for u in ups] == ["notes.txt", "more/a.txt", "more/sub/b.txt",
                                         "more/sub/blocks.bin"], ups
        task = client.submit(recipe=c.reads_url, commit=c.reads, prompt="read",
                             inputs=ups[:3])
        assert task.message is not None and task.message["inputs"][1] == {
            "name": "more/a.txt", "artifact": ups[1].key, "sha256": ups[1].sha256,
            "blocks": ups[1].blocks}, task.message
        res = task.wait(timeout=WAIT_S)
        assert res.succeeded, res
        assert task.artifact("notes.txt").read() == \
            b"uploaded words\nfrom a directory\nand below it\n"
        state["reads"] = task
    r.check("uploads given as inputs are read by the task", inputs_read_by_a_task)

    def artifacts() -> None:
        task = state["reads"]
        arts = task.artifacts()
        assert sorted(a.path for a in arts) == ["hello.txt", "notes.txt"], arts
        a = task.artifact("hello.txt")
        assert a.attempt == 1 and a.key == f"tasks/{task.id}/1/outputs/hello.txt", a
        assert a.size == len(b"hello, inputs\n") and a.sha256 == hashlib.sha256(
            b"hello, inputs\n").hexdigest(), a
        (c.tmp / "dl").mkdir()
        assert a.download(c.tmp / "dl") == c.tmp / "dl" / "hello.txt"
        assert (c.tmp / "dl" / "hello.txt").read_text() == "hello, inputs\n"
        here = os.getcwd()
        os.chdir(c.tmp / "dl")
        try:
            assert task.artifact("conversation").download() == pathlib.Path(
                "conversation.msgpack")
        finally:
            os.chdir(here)
        import msgpack
        first = next(iter(msgpack.Unpacker(open(c.tmp / "dl" / "conversation.msgpack", "rb"),
                                           raw=False)))
        assert first["type"] == "phase" and first["payload"]["phase"] == "received", first
        m = taskbox.codec.decode(task.artifact("manifest").read(), "manifest")
        assert m["task_id"] == task.id and m["outcome"] == "succeeded", m
        with a.open() as f:
            assert f.read() == b"hello, inputs\n"
        for bad, kind in (("nope.txt", taskbox.NotFound),):
            try:
                task.artifact(bad)
            except kind as e:
                assert f"task {task.id} has no artifact nope.txt" in str(e), e
            else:
                raise AssertionError("an artifact that is not there")
        nobody = client.task(taskbox.new_id())
        try:
            nobody.artifacts()
        except taskbox.TaskNotDone as e:
            assert e.state == "unknown" and "unknown to the ledger" in str(e), e
        else:
            raise AssertionError("a task nobody sent has a record")
    r.check("artifacts listed, downloaded, opened; the record's own objects", artifacts)

    def shares() -> None:
        task = state["reads"]
        a = task.artifact("hello.txt")
        out = subprocess.run([c.tb, "artifacts", "share", "--config", c.cfg, "--expires", "60",
                              task.id, "hello.txt"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        theirs = out.stdout.strip()
        when = urllib.parse.parse_qs(urllib.parse.urlsplit(theirs).query)["X-Amz-Date"][0]
        at = datetime.datetime.strptime(when, "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc)
        assert client.store().share(a.key, 60, now=at) == theirs, theirs  # to the byte
        url = a.share(expires=60)
        with urllib.request.urlopen(url, timeout=30) as got:
            assert got.read() == b"hello, inputs\n"
        check = subprocess.run([sys.executable, str(c.root / "tests/integration/cli/"
                                                    "check_share_url.py"), url,
                                os.environ["TASKBOX_TEST_S3_ENDPOINT"], c.run_id, a.key,
                                os.environ["TASKBOX_TEST_S3_REGION"], "60"],
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        try:
            a.share(expires=604801)
        except taskbox.UsageError as e:
            assert "1 to 604800 seconds" in str(e), e
        else:
            raise AssertionError("a share of 604801 s")
    r.check("a share URL is the command's, to the byte, and downloads", shares)

    def replaced_behind_the_store() -> None:
        task = state["reads"]
        a = task.artifact("notes.txt")
        st = client.store()
        st.delete(a.key)
        st.put_bytes(a.key, b"not what the agent wrote\n")  # with its own checksums
        out = c.tmp / "forged.txt"
        for call in (lambda: a.download(out), a.read):
            try:
                call()
            except taskbox.ChecksumMismatch as e:
                assert f"the manifest says {a.sha256}" in str(e), e
            else:
                raise AssertionError("other bytes were taken")
        assert not list(c.tmp.glob("forged.txt*")), list(c.tmp.glob("forged*"))
    r.check("an artifact replaced behind the store is refused, nothing kept", replaced_behind_the_store)

    def replay() -> None:
        orig = client.submit(recipe=c.asks_url, commit=c.asks, prompt="ask", runtime="recorded",
                             labels={"run": "recorded"})
        r1 = orig.wait(timeout=WAIT_S)
        assert r1.succeeded, r1
        assert len(c.provider.asked) == 1, c.provider.asked
        again = client.submit(replay_from=orig.id)
        msg = again.message
        assert msg is not None and msg["replay_from"] == orig.id and msg["replay"] == {
            "attempt": 1}, msg
        assert (msg["prompt"], msg["runtime"], msg["labels"]) == ("ask", "recorded",
                                                                  {"run": "recorded"}), msg
        r2 = again.wait(timeout=WAIT_S)
        assert r2.succeeded, r2
        assert len(c.provider.asked) == 1, c.provider.asked  # answered from the recording
        spent = [e for e in (r1.manifest or {})["usage"]["egress"] if e["endpoint"] == "llm"][0]
        paid = [e for e in (r2.manifest or {})["usage"]["egress"] if e["endpoint"] == "llm"][0]
        assert spent["input_tokens"] == 3 and not spent.get("replayed"), spent
        assert paid["replayed"] == 1 and paid["input_tokens"] == 0, paid  # no provider cost
        answer = again.artifact("answer.json").read()
        assert b'"answer":"forty-two"' in answer and answer == orig.artifact(
            "answer.json").read(), answer
        try:
            client.submit(replay_from=state["reads"].id)
        except taskbox.NotFound as e:
            assert "names no egress recording" in str(e), e
        else:
            raise AssertionError("a task that recorded nothing was replayed")
    r.check("a recorded run replayed from Python, its provider not asked again", replay)

    def dead_letters() -> None:
        dead = client.submit(recipe=c.hello_url, commit=c.hello, prompt="again", runtime="later")
        res = dead.wait(timeout=WAIT_S)
        assert res.outcome == "dead-lettered" and "unknown runtime 'later'" in res.reason, res
        letters = [d for d in client.dlq() if d.task_id == dead.id]
        assert len(letters) == 1, letters
        d = letters[0]
        assert d.cause == "poison" and "unknown runtime 'later'" in d.reason, d
        assert d.topic == client.config.tasks_topic and d.task() is not None, d
        assert (d.task() or {}).get("prompt") == "again", d.task()
        spec = json.loads((c.root / "examples/runtimes/default.json").read_text())
        spec["name"] = "later"
        (c.tmp / "runtimes" / "later.json").write_text(json.dumps(spec))  # the fix
        back = client.send_back(d)
        assert back.id == dead.id
        res = back.wait(timeout=WAIT_S)
        assert res.succeeded and res.attempt == 2, res
        try:
            client.send_back(d.where)  # read again from its place
        except taskbox.DeadLetterError as e:
            assert f"task {dead.id} is done with a record" in str(e) and not e.retry, e
        else:
            raise AssertionError("a done task was sent back")
        t0 = int(time.time() * 1000)
        client._produce("not-a-task", b"\x93\x01\x02\x03")
        bad: List[taskbox.DeadLetter] = []
        for _ in range(60):
            bad = [x for x in client.dlq() if x.cause == "malformed" and x.ts >= t0 - 2000]
            if bad:
                break
            time.sleep(0.5)
        assert bad, "no malformed record"
        try:
            client.send_back((bad[0].partition, bad[0].offset))
        except taskbox.DeadLetterError as e:
            assert "holds no task to send back (malformed)" in str(e), e
        else:
            raise AssertionError("a malformed message was sent back")
        try:
            client.send_back("0:999999")
        except taskbox.DeadLetterError as e:
            assert "no record at 0:999999" in str(e), e
        else:
            raise AssertionError("a record that is not there")
    r.check("a dead letter read, sent back after the fix, succeeds; others refused", dead_letters)

    def with_asyncio() -> None:
        import asyncio
        import contextlib

        async def go() -> None:
            one = client.submit(recipe=c.hello_url, commit=c.hello, prompt="async one")
            two = client.submit(recipe=c.hello_url, commit=c.hello, prompt="async two")
            seen: List[str] = []

            async def follow() -> None:
                async for ev in one.aevents(timeout=WAIT_S):
                    seen.append(ev.type)
            ticks = 0

            async def tick() -> None:  # the loop stays free meanwhile
                nonlocal ticks
                while not one._settled:
                    ticks += 1
                    await asyncio.sleep(0.05)
            await asyncio.gather(follow(), tick())
            assert seen[0] == "phase" and "result" in seen, seen
            assert ticks >= 1, ticks
            a, b = await asyncio.gather(one.await_result(), two.await_result(timeout=WAIT_S))
            assert a.succeeded and b.succeeded and len(b.verdicts) == 2, (a, b)
            # leaving early: the reading thread ends
            settled = client.task(one.id)
            async with contextlib.AsyncExitStack() as stack:
                events = settled.aevents()
                stack.push_async_callback(events.aclose)
                async for ev in events:
                    assert ev.type == "phase"
                    break
            await asyncio.sleep(0.5)
            left = [t.name for t in threading.enumerate() if t.name.startswith("taskbox-events")]
            assert not left, left
            try:
                await client.task(taskbox.new_id()).await_result(timeout=2)
            except taskbox.TaskTimeout:
                pass
            else:
                raise AssertionError("a task nobody sent was settled")
        asyncio.run(go())
    r.check("asyncio: events and results awaited, the loop free, an early exit stops", with_asyncio)
    client.close()


if __name__ == "__main__":
    sys.exit(main())
