"""The task side of the deploy tests: a run's own topics, group, ledger
prefix and bucket on the test services (so that no other test's worker
takes its tasks), recipe repositories, and tasks submitted and followed
from the host with the host's taskbox.

A run is named tb<what>-<pid>: its topics <name>.tasks/.events/.dlq,
its bucket <name> (tests/tools/drop-test-buckets drops it after the
suite), its ledger prefix <name>.
"""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from podman import check, log, sh, wait_for

SLOW_AGENT = """#!/bin/sh
# takes its time, so that a stop finds it running
read -r prompt
printf '{"type":"message","role":"assistant","text":"working"}\\n' >&3
sleep 6
echo slept > /outputs/slept.txt
"""


class Run:
    def __init__(self, src, taskbox, svc, what, partitions=2):
        self.src, self.taskbox, self.svc = src, taskbox, svc
        self.partitions = partitions
        self.name = f"tb{what}-{os.getpid()}"
        # under /tmp, reachable by the sandboxes' users (they pass through)
        self.dir = tempfile.mkdtemp(prefix=f"tb-{what}-")
        os.chmod(self.dir, 0o711)
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID=svc["TASKBOX_TEST_S3_ACCESS_KEY"],
                        AWS_SECRET_ACCESS_KEY=svc["TASKBOX_TEST_S3_SECRET_KEY"],
                        LSAN_OPTIONS="detect_leaks=0")
        sh(f"{src}/deploy/local/services topic {self.name}.tasks:{partitions} "
           f"{self.name}.events:1 "
           f"{self.name}.dlq:1 >/dev/null")
        sh(f"curl -sf --max-time 30 -X PUT --aws-sigv4 'aws:amz:{svc['TASKBOX_TEST_S3_REGION']}:s3' "
           f"--user \"$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY\" "
           f"{svc['TASKBOX_TEST_S3_ENDPOINT']}/{self.name}", env=self.env)
        self.client = self.config(os.path.join(self.dir, "client.json"))

    def settings(self):
        """The configuration keys that point a worker at this run, as
        TASKBOX_* variables (schemas/config.md)."""
        s = self.svc
        return {
            "TASKBOX_KAFKA_BROKERS": s["TASKBOX_TEST_KAFKA"],
            "TASKBOX_KAFKA_GROUP": self.name,
            "TASKBOX_KAFKA_TASKS_TOPIC": f"{self.name}.tasks",
            "TASKBOX_KAFKA_EVENTS_TOPIC": f"{self.name}.events",
            "TASKBOX_KAFKA_DLQ_TOPIC": f"{self.name}.dlq",
            "TASKBOX_LEDGER_URL": s["TASKBOX_TEST_REDIS"],
            "TASKBOX_LEDGER_PREFIX": self.name,
            "TASKBOX_STORE_URL": f"s3://{self.name}",
            "TASKBOX_STORE_ENDPOINT": s["TASKBOX_TEST_S3_ENDPOINT"],
            "TASKBOX_STORE_REGION": s["TASKBOX_TEST_S3_REGION"],
        }

    def config(self, path):
        """A client's configuration file for this run (submit, artifacts)."""
        s = self.svc
        with open(path, "w") as f:
            json.dump({"v": 1,
                       "kafka": {"brokers": s["TASKBOX_TEST_KAFKA"], "group": self.name,
                                 "tasks_topic": f"{self.name}.tasks",
                                 "events_topic": f"{self.name}.events",
                                 "dlq_topic": f"{self.name}.dlq"},
                       "ledger": {"url": s["TASKBOX_TEST_REDIS"], "prefix": self.name},
                       "store": {"url": f"s3://{self.name}", "endpoint": s["TASKBOX_TEST_S3_ENDPOINT"],
                                 "region": s["TASKBOX_TEST_S3_REGION"]}}, f)
        return path

    def recipe(self, name, files=None, copy=None):
        """A git repository of a recipe: @p copy (a directory of the
        sources' examples/recipes) and @p files {path: text}; @return
        (file:// URL, commit)."""
        repo = os.path.join(self.dir, "recipes", name)
        if copy:
            shutil.copytree(os.path.join(self.src, "examples/recipes", copy), repo)
        else:
            os.makedirs(repo)
        for p, text in (files or {}).items():
            os.makedirs(os.path.dirname(os.path.join(repo, p)), exist_ok=True)
            with open(os.path.join(repo, p), "w") as f:
                f.write(text)
        git = f"git -C {repo} -c user.name=t -c user.email=t@t"
        sh(f"git init -q {repo} && {git} add -A && {git} commit -qm {name}")
        return "file://" + repo, sh(f"git -C {repo} rev-parse HEAD").strip()

    def submit(self, task_id, recipe, *extra, timeout=180):
        """Submits a task and follows it to its end; @return (exit status,
        the events as dicts, the output)."""
        return submit_wait(self.taskbox, self.client, self.env, task_id, recipe, *extra,
                           timeout=timeout)

    def artifact(self, task_id, path):
        """The text of a done task's output @p path."""
        return artifact_get(self.taskbox, self.client, self.env, self.dir, task_id, path)[0]

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def submit_wait(taskbox, config, env, task_id, recipe, *extra, timeout=180):
    """`taskbox submit --wait --json` of @p recipe (url, commit) with
    client configuration @p config; @return (exit status, the events as
    dicts, the output)."""
    url, commit = recipe
    argv = [taskbox, "submit", "-c", config, "--wait", "--json", "--timeout", str(timeout),
            "--id", task_id, "--recipe", url, "--commit", commit, "--prompt", f"task {task_id}",
            *extra]
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout + 60)
    events = []
    for line in r.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    return r.returncode, events, r.stdout + r.stderr


def artifact_get(taskbox, config, env, where, task_id, path):
    """`taskbox artifacts get` of a done task's output @p path into
    directory @p where; @return (its text, "") or (None, the output)."""
    out = os.path.join(where, f"{task_id}-{os.path.basename(path)}")
    r = subprocess.run([taskbox, "artifacts", "get", "-c", config, "--output", out, task_id,
                        path], capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        return None, r.stdout + r.stderr
    with open(out) as f:
        return f.read(), ""


def result_of(events):
    """The payload of a task's `result` event, or {}."""
    for e in events:
        if e.get("type") == "result":
            return e.get("payload", {})
    return {}


def report(what, rc, out):
    log(f"{what}: exit {rc}\n" + "\n".join(out.splitlines()[-25:]))


def slow_recipe(run):
    """A recipe whose agent takes 6 s (SLOW_AGENT)."""
    return run.recipe("slow", {
        "taskbox.json": json.dumps({"v": 1, "name": "slow",
                                    "agent": {"command": ["/bin/sh", "agent.sh"]}}),
        "agent.sh": SLOW_AGENT})


def drain_check(run, recipe, task_id, tag, how, stop):
    """Submits a slow task, and once it runs calls @p stop (named @p how;
    it returns (ok, why)): the stop must wait for the task, which must
    succeed in its first attempt. @return whether the stop returned."""
    url, commit = recipe
    argv = [run.taskbox, "submit", "-c", run.client, "--wait", "--json", "--timeout", "150",
            "--id", task_id, "--recipe", url, "--commit", commit, "--prompt", "slow"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=run.env)
    lines = []
    t = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
    t.start()

    def running():
        return p.poll() is not None or any('"phase":"running"' in l for l in list(lines))
    try:
        wait_for(f"{tag}: the slow task running", running, 90, 0.05)
        if p.poll() is not None:
            raise TimeoutError("it ended")
    except TimeoutError:
        p.kill()
        check(False, f"{tag}: the slow task started", "".join(lines[-20:]))
        return False
    t0 = time.monotonic()
    ok, why = stop()
    took = time.monotonic() - t0
    check(ok, f"{tag}: {how} returned in {took:.1f} s", why)
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = -1
    t.join(5)
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    res = result_of(events)
    received = [e for e in events if e.get("type") == "phase"
                and e.get("payload", {}).get("phase") == "received"]
    check(rc == 0 and res.get("outcome") == "succeeded",
          f"{tag}: the running task finished during the stop ({res.get('outcome')})",
          f"submit exit {rc}\n{''.join(lines[-15:])}")
    check(len(received) == 1, f"{tag}: in one attempt ({len(received)} received)")
    check(took >= 2, f"{tag}: the stop waited for it ({took:.1f} s)")
    return ok
