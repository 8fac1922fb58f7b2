"""A fleet of workers on one host, for the fleet test and the container
bench: workers started as containers of the worker image (the settings
of deploy/k8s/deployment.yaml, container_worker.start) or as bare
processes of a taskbox binary with the same configuration and the same
kinds of directories; killed, restarted and stopped by name; a batch of
tasks submitted with the Python client (clients/python) and counted from
outside: the ledger's done-markers and the events topic.

Each worker has its own work, cache and tmp directories (as each pod has
its own emptyDirs) and its own metrics port; they share the
configuration, the runtimes and the host's id-range registry.
"""
import os
import signal
import subprocess
import sys
import time

import podman as pm
from container_worker import start as start_container

HERE = os.path.dirname(os.path.abspath(__file__))


def client_module(src):
    """The Python client of the tree (clients/python), imported."""
    sys.path.insert(0, os.path.join(src, "clients/python"))
    import taskbox  # noqa: F401 (the package this tree ships)
    return taskbox


class Worker:
    def __init__(self, name, port, kind):
        self.name, self.port, self.kind = name, port, kind
        self.proc = None   # a bare process's Popen,
        self.env = None    # its environment
        self.log = None    # and its log file's path

    def ready(self):
        return pm.http_get(f"http://127.0.0.1:{self.port}/readyz", 1)[0] == 200

    def busy(self):
        """Its slots running a task (taskbox_slots_busy), 0 if unknown."""
        code, body = pm.http_get(f"http://127.0.0.1:{self.port}/metrics", 1)
        for line in body.splitlines() if code == 200 else []:
            if line.startswith("taskbox_slots_busy "):
                return int(float(line.split()[1]))
        return 0


class Fleet:
    """Workers of one taskrun.Run. @p vols: the configuration and
    runtimes directories (container_worker.layout); @p image with @p cs
    (a podman.Containers) for containers, @p taskbox for bare processes;
    @p env: more TASKBOX_* settings for every worker."""

    def __init__(self, run, vols, image=None, cs=None, taskbox=None, env=None):
        self.run, self.vols, self.image, self.cs = run, vols, image, cs
        self.taskbox, self.env = taskbox, dict(env or {})
        self.workers = {}

    def _dirs(self, what):
        v = dict(self.vols)
        for d in ("work", "cache", "tmp"):
            v[d] = os.path.join(self.run.dir, what, d)
            os.makedirs(v[d], exist_ok=True)
        os.chmod(os.path.join(self.run.dir, what), 0o711)
        return v

    def start(self, what):
        """Starts worker @p what; @return (Worker, seconds to /readyz 200)."""
        port, v = pm.free_port(), self._dirs(what)
        if self.image:
            extra = []
            for k, val in self.env.items():
                extra += ["-e", f"{k}={val}"]
            name, took = start_container(self.cs, self.image, self.run, v, port, what, extra)
            w = Worker(name, port, "container")
        else:
            w = Worker(f"{self.run.name}-{what}", port, "process")
            env = dict(self.run.env, **self.run.settings(), **self.env,
                       TASKBOX_WORKER_ID=w.name, TASKBOX_METRICS_LISTEN=f"127.0.0.1:{port}",
                       TASKBOX_RUNTIMES_DIR=v["runtimes"], TASKBOX_WORK_DIR=v["work"],
                       TASKBOX_CACHE_DIR=v["cache"], TMPDIR=v["tmp"])
            w.env, w.log = env, os.path.join(self.run.dir, what, "worker.log")
            t0 = time.monotonic()
            with open(w.log, "ab") as log:
                w.proc = subprocess.Popen([self.taskbox, "worker", "--config",
                                           os.path.join(v["config"], "worker.json")],
                                          env=env, stdout=log, stderr=log,
                                          stdin=subprocess.DEVNULL)
            took = self._ready(w, t0)
        self.workers[what] = w
        return w, took

    def _ready(self, w, t0, secs=180):
        try:
            pm.wait_for(f"{w.name} ready", w.ready, secs, 0.02)
        except TimeoutError:
            pm.log(f"{w.name}: /readyz {pm.http_get(f'http://127.0.0.1:{w.port}/readyz')}\n"
                   f"{self.logs(w)}")
            raise
        return time.monotonic() - t0

    def logs(self, w, tail=40):
        if w.kind == "container":
            return self.cs.logs(w.name, tail)
        try:
            with open(w.log, errors="replace") as f:
                return "".join(f.readlines()[-tail:])
        except OSError as e:
            return str(e)

    def kill(self, w):
        """SIGKILL to the worker (a container: to its init, the worker)."""
        if w.kind == "container":
            pm.podman("kill", "-s", "KILL", w.name, timeout=60)
            pm.podman("wait", w.name, timeout=60, check=False)
        else:
            w.proc.kill()
            w.proc.wait(60)

    def restart(self, w):
        """Starts a killed worker again under its name (the container
        itself, as a pod's restart policy does); @return seconds to ready."""
        t0 = time.monotonic()
        if w.kind == "container":
            pm.podman("start", w.name, timeout=120)
        else:
            with open(w.log, "ab") as log:
                w.proc = subprocess.Popen(w.proc.args, env=w.env, stdout=log, stderr=log,
                                          stdin=subprocess.DEVNULL)
        return self._ready(w, t0)

    def stop(self, w, grace=150):
        """SIGTERM, the drain awaited; @return (exit status, seconds)."""
        t0 = time.monotonic()
        if w.kind == "container":
            pm.podman("stop", "-t", str(grace), w.name, timeout=grace + 60, check=False)
            code = pm.podman("inspect", "--format", "{{.State.ExitCode}}", w.name).stdout.strip()
            code = int(code) if code.lstrip("-").isdigit() else -1
        else:
            w.proc.send_signal(signal.SIGTERM)
            try:
                code = w.proc.wait(grace)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                code = w.proc.wait()
        return code, time.monotonic() - t0

    def close(self):
        """Kills what still runs (the containers go with cs)."""
        for w in self.workers.values():
            if w.proc and w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()

    def orphans(self):
        """What the fleet's workers left on the host: processes in a
        sandbox cgroup of theirs, such cgroups, mounts under their
        directories, entries in their work directories. @return lines."""
        found = []
        for what, w in self.workers.items():
            group = f"/tb-{w.name}/"
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/cgroup") as f:
                        if group in f.read():
                            found.append(f"process {pid} in {group}")
                except OSError:
                    pass
            r = subprocess.run(["find", "/sys/fs/cgroup", "-type", "d", "-path", f"*{group}*"],
                               capture_output=True, text=True)
            found += [f"cgroup {p}" for p in r.stdout.split()]
            top = os.path.join(self.run.dir, what)
            with open("/proc/self/mountinfo") as f:
                found += [f"mount {line.split()[4]}" for line in f
                          if line.split()[4].startswith(top + "/")]
            work = os.path.join(top, "work")
            found += [f"left in {work}: {e}" for e in sorted(os.listdir(work))]
        return found


def submit_all(src, run, recipe, n, tag, labels=None):
    """@p n tasks of @p recipe, submitted with the Python client;
    @return their ids in order."""
    taskbox = client_module(src)
    url, commit = recipe
    ids = [f"{tag}-{i:03d}" for i in range(n)]
    with taskbox.Client(run.client) as c:
        for i in ids:
            c.submit(recipe=url, commit=commit, prompt=f"task {i}", id=i, labels=labels)
    return ids


class Tally:
    """Done-markers of a batch, read from the ledger."""

    def __init__(self, src, run, ids):
        taskbox = client_module(src)
        self.ledger = taskbox.Client(run.client).ledger()
        self.ids, self.done = list(ids), {}

    def count(self):
        for i in self.ids:
            if i not in self.done:
                d = self.ledger.done(i)
                if d:
                    self.done[i] = d
        return len(self.done)

    def wait(self, n, secs):
        """Waits (at most @p secs) for @p n tasks done; @return the count."""
        t0 = time.monotonic()
        while self.count() < n and time.monotonic() - t0 < secs:
            time.sleep(0.2)
        return len(self.done)


def events_by_attempt(src, run):
    """Every event on the run's events topic (one partition) to its end:
    {(task, attempt): [event dict, ...]} in seq order, repeats dropped."""
    from confluent_kafka import Consumer, TopicPartition
    taskbox = client_module(src)
    c = Consumer({"bootstrap.servers": run.svc["TASKBOX_TEST_KAFKA"],
                  "group.id": f"{run.name}-reader", "enable.auto.commit": False})
    tp = TopicPartition(f"{run.name}.events", 0, 0)
    end = c.get_watermark_offsets(tp, timeout=30)[1]
    c.assign([tp])
    got, pos, deadline = {}, 0, time.monotonic() + 120
    while pos < end and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        pos = m.offset() + 1
        ev = taskbox.codec.decode(m.value(), "event")
        got.setdefault((ev["task_id"], ev["attempt"]), {})[ev["seq"]] = ev
    c.close()
    if pos < end:
        raise RuntimeError(f"the events topic was not read to its end: {pos} of {end}")
    return {k: [v[s] for s in sorted(v)] for k, v in got.items()}


def phase(evs, name):
    """The first `phase` event @p name of an attempt's events, or None."""
    for e in evs:
        if e["type"] == "phase" and e["payload"].get("phase") == name:
            return e
    return None


def spans(events):
    """{task: [(began ms, last event ms, attempt, worker), ...]} sorted:
    an attempt begins at its `claimed` phase (stamped as it begins)."""
    out = {}
    for (task, attempt), evs in events.items():
        claimed, received = phase(evs, "claimed"), phase(evs, "received")
        out.setdefault(task, []).append(
            (claimed["ts"] if claimed else evs[0]["ts"], evs[-1]["ts"], attempt,
             received["payload"].get("worker") if received else None))
    for sp in out.values():
        sp.sort()
    return out


def overlaps(sp):
    """Attempts of one task that ran at the same time: @return lines."""
    bad = []
    for task, s in sorted(sp.items()):
        for (s1, e1, a1, w1), (s2, _, a2, w2) in zip(s, s[1:]):
            if s2 < e1:
                bad.append(f"{task}: attempts {a1} ({w1}) and {a2} ({w2}) ran at once")
    return bad


def result_events(events):
    """{(task, attempt): the `result` event's payload}."""
    return {k: e["payload"] for k, evs in events.items() for e in evs if e["type"] == "result"}

