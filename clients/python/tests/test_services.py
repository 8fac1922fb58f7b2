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
- a task refused before sending, naming the field; a wait that times out.

Exits 77 when the services' variables are missing (tests/run sets them).
Usage: test_services.py TASKBOX SOURCE_DIR
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, List

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import taskbox  # noqa: E402

NEEDED = ("TASKBOX_TEST_KAFKA", "TASKBOX_TEST_REDIS", "TASKBOX_TEST_S3_ENDPOINT",
          "TASKBOX_TEST_S3_ACCESS_KEY", "TASKBOX_TEST_S3_SECRET_KEY", "TASKBOX_TEST_S3_REGION")
WAIT_S = 180  # at most, for any one task


def git_recipe(root: pathlib.Path, name: str, into: pathlib.Path) -> str:
    """The example recipe ``name`` in a repository of its own; its commit."""
    shutil.copytree(root / "examples" / "recipes" / name, into)
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
    s3.create_bucket(Bucket=run_id)

    hello = git_recipe(root, "hello", tmp / "hello")
    chat = git_recipe(root, "chat", tmp / "chat")
    (tmp / "runtimes").mkdir()
    shutil.copy(root / "examples/runtimes/default.json", tmp / "runtimes")
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
    r = Run()
    try:
        tests(r, tb, str(cfg_path), f"file://{tmp}/hello", hello, f"file://{tmp}/chat", chat)
    finally:
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


if __name__ == "__main__":
    sys.exit(main())
