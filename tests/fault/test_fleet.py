#!/usr/bin/env python3
"""test_fleet.py: a fleet of `taskbox worker`s on several hosts, through
scale events and a ledger failover, with live interactive sessions.

Each host is a network namespace of its own, with an address of its own
on a veth pair to the real host (10.231.H.2, the host's end 10.231.H.1):
its only wire to the services on the real host's loopback, the test's
Kafka and S3 server, and a ledger of the test's own, Redis with a replica
and three sentinels (`ledger.url` redis-sentinel://). Those advertise
127.0.0.1 addresses, so each host translates its connections to them
(netfilter: in the namespace, to 127.0.0.1:PORT becomes to
10.231.H.1:PORT, from its own address; on the real host, arriving there
becomes to 127.0.0.1:PORT, route_localnet on its end of the pair):
every byte a worker sends to a service crosses the veth, from the host's
own address, and nothing but those ports is reachable. Cutting a host off
takes its end of the pair down (connections stall, as when a cable is
pulled); healing brings it up again. The test starts two workers on each of four hosts (eight), submits 100
interactive sessions of the chat recipe with the taskbox CLI, and then
goes through 20 scale events, follow-ups and a stream of one-shot tasks
sent between them: a worker added, one stopped (SIGTERM), one killed
(SIGKILL), a host cut off from the services and healed, in turn; at the
tenth, the Redis master is killed and a sentinel promotes its replica.
Then every session is ended and the test waits for all of them.

Counted from outside (the ledger, the store, the events topic), it
requires every task done once, succeeded and judged "pass", each session
with its three turns and three follow-ups in the manifest; no two
attempts of one task running at the same time (their events' time
spans); no turn answered twice in an attempt; the recorded attempt's
events on the topic; and every worker still running to
stop cleanly. It prints, for each scale event, the sessions it restarted
(each restart laid to the last event that concerned the worker of the
new attempt, if added, or of the one before, if stopped, killed or cut
off: the `received` event names each attempt's worker, and each worker
start has an id of its own), those moved between workers no event
concerned or restarted where they ran, and `submitted / done / lost / dead-lettered / sessions
replayed`. Every loop is bounded in count and time;
everything started is stopped by its pid, and the namespaces removed.

Skips (exit 77) without root, `ip`, `iptables`, redis-server, the services
(TASKBOX_TEST_KAFKA, TASKBOX_TEST_S3_*), boto3 or confluent_kafka.
Usage: test_fleet.py TASKBOX_BINARY SOURCE_DIR
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HOSTS = 4
WORKERS_PER_HOST = 2
SESSIONS = 100
EVENTS = 20
PARTITIONS = 16
SLOTS = 24
ONESHOTS_PER_EVENT = 2


def skip(why):
    print(f"test_fleet: skipped: {why}")
    sys.exit(77)


def ready(p, what, secs=30):
    """Waits (at most @secs) for @p's first line to say "ready"."""
    import select
    if select.select([p.stdout], [], [], secs)[0] and p.stdout.readline().strip() == b"ready":
        return
    raise RuntimeError(f"{what} did not start in {secs} s")


def free_ports(n):
    """n consecutive free ports on 127.0.0.1."""
    for _ in range(50):
        base = random.randint(30000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


class Fleet:
    def __init__(self, taskbox, source):
        self.taskbox = taskbox
        self.source = source
        self.dir = tempfile.mkdtemp(prefix="tb-fleet-")
        os.chmod(self.dir, 0o711)  # sandboxes' users pass through
        self.tag = f"{os.getpid()}-{int(time.time())}"
        self.procs = []  # every process started: stopped by pid at the end
        self.nat = f"TBFLEET-{os.getpid()}"  # the real host's chain: removed at the end
        self.workers = {}  # name -> (host, Popen)
        self.netns = []
        self.veths = []  # the real host's end of each host's pair
        self.starts = 0  # workers started: each logs to NAME-N.log
        self.kafka = os.environ["TASKBOX_TEST_KAFKA"]
        self.s3 = os.environ["TASKBOX_TEST_S3_ENDPOINT"]

    # ------------------------------------------------------ set-up
    def start(self, args, netns=None, **kw):
        if netns:  # not `ip netns exec`: it mounts a sysfs of its own, hiding the cgroups
            args = ["nsenter", f"--net=/run/netns/{netns}"] + args
        p = subprocess.Popen(args, **kw)
        self.procs.append(p)
        return p

    def redis(self):
        """A master, its replica and three sentinels, on ports of their own."""
        base = free_ports(5)
        self.redis_ports = list(range(base, base + 5))
        master, replica = base, base + 1
        for port, extra in ((master, []), (replica, ["--replicaof", "127.0.0.1", str(master)])):
            d = os.path.join(self.dir, f"redis-{port}")
            os.mkdir(d)
            # protected mode refuses the hosts' addresses; only 127.0.0.1
            # listens, and only the hosts' veths are translated to it
            self.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--protected-mode", "no", "--dir", d] + extra,
                       stdout=subprocess.DEVNULL)
        self.master = self.procs[-2]
        for port in range(base + 2, base + 5):
            conf = os.path.join(self.dir, f"sentinel-{port}.conf")
            with open(conf, "w") as f:
                f.write(f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.dir}\n"
                        f"sentinel monitor tbfleet 127.0.0.1 {master} 1\n"
                        "sentinel down-after-milliseconds tbfleet 1000\n"
                        "sentinel failover-timeout tbfleet 5000\n")
            self.start(["redis-server", conf, "--sentinel"], stdout=subprocess.DEVNULL)
        for _ in range(100):  # the replica in sync: 10 s at most
            out = subprocess.run(["redis-cli", "-p", str(master), "info", "replication"],
                                 capture_output=True, text=True, timeout=5).stdout
            if "connected_slaves:1" in out and "state=online" in out:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the Redis replica never came in sync")
        sentinels = ",".join(f"127.0.0.1:{p}" for p in range(base + 2, base + 5))
        self.ledger = f"redis-sentinel://{sentinels}/tbfleet"

    def topics(self):
        from confluent_kafka.admin import AdminClient, NewTopic
        self.tasks, self.events, self.dlq = (f"fleet-{self.tag}.{t}"
                                             for t in ("tasks", "events", "dlq"))
        admin = AdminClient({"bootstrap.servers": self.kafka})
        fs = admin.create_topics([NewTopic(self.tasks, PARTITIONS, 1),
                                  NewTopic(self.events, 4, 1), NewTopic(self.dlq, 1, 1)])
        for f in fs.values():
            f.result(timeout=30)

    def bucket(self):
        import boto3
        self.bucket_name = f"tb-fleet-{os.getpid()}"
        s3 = boto3.client("s3", endpoint_url=self.s3,
                          region_name=os.environ["TASKBOX_TEST_S3_REGION"],
                          aws_access_key_id=os.environ["TASKBOX_TEST_S3_ACCESS_KEY"],
                          aws_secret_access_key=os.environ["TASKBOX_TEST_S3_SECRET_KEY"])
        s3.create_bucket(Bucket=self.bucket_name)
        self.s3c = s3

    def recipe(self):
        repo = os.path.join(self.dir, "chat")
        shutil.copytree(os.path.join(self.source, "examples/recipes/chat"), repo)
        git = ["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(["git", "init", "-q", repo], check=True)
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-qm", "chat"], check=True)
        self.commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True,
                                     capture_output=True, text=True).stdout.strip()
        self.recipe_url = "file://" + repo
        # the default runtime, but sessions wait for their follow-ups
        # longer than the whole test runs
        rt = os.path.join(self.dir, "runtimes")
        os.mkdir(rt)
        with open(os.path.join(self.source, "examples/runtimes/default.json")) as f:
            runtime = json.load(f)
        runtime["agent"]["idle_timeout_seconds"] = 3600
        with open(os.path.join(rt, "default.json"), "w") as f:
            json.dump(runtime, f)

    def config(self, name, wid=None):
        """A worker's configuration; @wid its worker_id (@name's)."""
        path = os.path.join(self.dir, f"{name}.json")
        with open(path, "w") as f:
            json.dump({
                "v": 1, "worker_id": wid or f"fl{os.getpid()}-{name}", "slots": SLOTS, "log_level": "info",
                "kafka": {"brokers": self.kafka, "group": f"fleet-{self.tag}",
                          "tasks_topic": self.tasks, "events_topic": self.events,
                          "dlq_topic": self.dlq,
                          "properties": {"session.timeout.ms": "10000"}},
                "ledger": {"url": self.ledger, "prefix": f"fleet-{self.tag}",
                           "lease_ms": 6000},
                "store": {"url": f"s3://{self.bucket_name}/runs", "endpoint": self.s3,
                          "region": os.environ["TASKBOX_TEST_S3_REGION"]},
                "runtimes_dir": os.path.join(self.dir, "runtimes"),
                "work_dir": os.path.join(self.dir, "work"),
                "cache_dir": os.path.join(self.dir, "cache"),
                "drain_seconds": 30}, f)
        return path

    def ports(self):
        kafka_port = int(self.kafka.rsplit(":", 1)[1])
        s3_port = int(self.s3.rsplit(":", 1)[1].split("/")[0])
        return [kafka_port, s3_port] + self.redis_ports

    def wire(self):
        """The hosts, each on a veth pair, and the real host's side of the
        translation (what an earlier run killed from outside left, removed)."""
        for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                   text=True).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith("tbfleet-") and not os.path.exists(f"/proc/{name.split('-')[1]}"):
                subprocess.run(["ip", "netns", "del", name])
        for line in subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True,
                                   text=True).stdout.splitlines():
            if line.startswith("-N TBFLEET-") and not os.path.exists(f"/proc/{line[11:]}"):
                self.unnat(line[3:])
        ports = ",".join(str(x) for x in self.ports())
        nat = ["iptables", "-w", "5", "-t", "nat"]
        subprocess.run(nat + ["-N", self.nat], check=True)
        subprocess.run(nat + ["-I", "PREROUTING", "-j", self.nat], check=True)
        for h in range(HOSTS):
            ns, veth = f"tbfleet-{os.getpid()}-h{h}", f"tbf{os.getpid()}h{h}"
            near, far = f"10.231.{h}.1", f"10.231.{h}.2"
            subprocess.run(["ip", "netns", "add", ns], check=True)
            self.netns.append(ns)
            inside = ["nsenter", f"--net=/run/netns/{ns}"]
            for cmd in (["ip", "link", "add", veth, "type", "veth", "peer", "name", "wire",
                         "netns", ns],
                        ["ip", "addr", "add", f"{near}/30", "dev", veth],
                        ["ip", "link", "set", veth, "up"],
                        ["sysctl", "-qw", f"net.ipv4.conf.{veth}.route_localnet=1"],
                        nat + ["-A", self.nat, "-i", veth, "-d", near, "-p", "tcp", "-m",
                               "multiport", "--dports", ports, "-j", "DNAT",
                               "--to-destination", "127.0.0.1"],
                        ["ip", "-n", ns, "link", "set", "lo", "up"],
                        ["ip", "-n", ns, "addr", "add", f"{far}/30", "dev", "wire"],
                        ["ip", "-n", ns, "link", "set", "wire", "up"],
                        inside + ["sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1"],
                        inside + nat + ["-A", "OUTPUT", "-d", "127.0.0.1", "-p", "tcp", "-m",
                                        "multiport", "--dports", ports, "-j", "DNAT",
                                        "--to-destination", near],
                        inside + nat + ["-A", "POSTROUTING", "-o", "wire", "-j", "SNAT",
                                        "--to-source", far]):
                subprocess.run(cmd, check=True)
            self.veths.append(veth)
        for h in range(HOSTS):  # each host reaches the ledger, and only over its wire
            out = subprocess.run(["nsenter", f"--net=/run/netns/{self.netns[h]}", "redis-cli",
                                  "-p", str(self.redis_ports[0]), "ping"],
                                 capture_output=True, text=True, timeout=10).stdout
            if out.strip() != "PONG":
                raise RuntimeError(f"host {h} cannot reach the ledger over its veth: {out!r}")

    @staticmethod
    def unnat(chain):
        nat = ["iptables", "-w", "5", "-t", "nat"]
        subprocess.run(nat + ["-D", "PREROUTING", "-j", chain], stderr=subprocess.DEVNULL)
        subprocess.run(nat + ["-F", chain], stderr=subprocess.DEVNULL)
        subprocess.run(nat + ["-X", chain], stderr=subprocess.DEVNULL)

    def link(self, h, state):
        subprocess.run(["ip", "link", "set", self.veths[h], state], check=True)

    def heal(self, h):
        self.link(h, "up")

    def cut(self, h):
        self.link(h, "down")

    # ------------------------------------------------------ workers
    def start_worker(self, h):
        n = sum(1 for w in self.workers if w.startswith(f"h{h}-")) + 1
        name = f"h{h}-w{n}"
        while name in self.workers:
            n += 1
            name = f"h{h}-w{n}"
        self.starts += 1
        log = open(os.path.join(self.dir, f"{name}-{self.starts}.log"), "ab")
        # each start a worker id of its own: the events tell its attempts apart
        wid = f"fl{os.getpid()}-{name}-{self.starts}"
        p = self.start([self.taskbox, "worker", "--config", self.config(name, wid)],
                       netns=self.netns[h], stdout=log, stderr=log)
        log.close()
        p.log = log.name
        p.wid = wid
        self.workers[name] = (h, p)
        return name

    def stop_worker(self, name, sig):
        h, p = self.workers.pop(name)
        p.send_signal(sig)
        try:
            p.wait(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise RuntimeError(f"worker {name} did not stop in 90 s after {sig}")
        if sig == signal.SIGTERM and p.returncode != 0:
            subprocess.run(["tail", "-n", "30", p.log])
            raise RuntimeError(f"worker {name} stopped with status {p.returncode} ({p.log})")

    # ------------------------------------------------------ the CLI
    def cli(self, *args, ok=(0,)):
        cfg = os.path.join(self.dir, "cli.json")
        if not os.path.exists(cfg):
            self.config("cli")
        r = subprocess.run([self.taskbox] + list(args[:1]) + ["--config", cfg] +
                           list(args[1:]), capture_output=True, text=True, timeout=60)
        if r.returncode not in ok:
            raise RuntimeError(f"taskbox {' '.join(args)}: {r.returncode}: {r.stderr[-500:]}")
        return r.stdout

    def manifest(self, key):
        import msgpack
        obj = self.s3c.get_object(Bucket=self.bucket_name, Key="runs/" + key)
        return msgpack.unpackb(obj["Body"].read(), raw=False)

    # ------------------------------------------------------ tear-down
    def sweep(self):
        """The sandboxes of killed workers not started again: their
        cgroups (tb-fl<pid>-*), thawed, emptied and removed, as a
        worker's own start would."""
        groups = []
        for root, dirs, _ in os.walk("/sys/fs/cgroup"):
            mine = [d for d in dirs if d.startswith(f"tb-fl{os.getpid()}-")]
            groups += [os.path.join(root, d) for d in mine]
            dirs[:] = [d for d in dirs if d not in mine and not d.startswith("tb-")]
        leaves = []
        for g in groups:
            try:
                leaves += [os.path.join(g, x) for x in os.listdir(g)
                           if os.path.isdir(os.path.join(g, x))]
            except OSError:
                pass
        for leaf in leaves:
            for name, value in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
                try:
                    with open(os.path.join(leaf, name), "w") as f:
                        f.write(value)
                except OSError:
                    pass
        for leaf in leaves:
            try:
                for pid in open(os.path.join(leaf, "cgroup.procs")).read().split():
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        for d in leaves + groups:
            for _ in range(50):  # 5 s at most
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()
                p.wait()
        for ns in self.netns:  # their veths go with them
            subprocess.run(["ip", "netns", "del", ns])
        self.unnat(self.nat)
        self.sweep()
        subprocess.run(["rm", "-rf", self.dir])


def read_events(f):
    """Every event of the run's events topic, to its end: {(task, attempt):
    [event, ...]} ordered by seq (duplicates of a triple dropped)."""
    import msgpack
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": f.kafka, "group.id": f"fleet-reader-{f.tag}",
                  "enable.auto.commit": False})
    parts = [TopicPartition(f.events, p, 0) for p in range(4)]
    ends = {p.partition: c.get_watermark_offsets(p, timeout=30)[1] for p in parts}
    c.assign(parts)
    got, pos = {}, {p: 0 for p in ends}
    deadline = time.monotonic() + 300
    while any(pos[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None or m.error():
            continue
        pos[m.partition()] = m.offset() + 1
        ev = msgpack.unpackb(m.value(), raw=False)
        got.setdefault((ev["task_id"], ev["attempt"]), {})[ev["seq"]] = ev
    c.close()
    if any(pos[p] < ends[p] for p in ends):
        raise RuntimeError(f"the events topic was not read to its end in 300 s: {pos} of {ends}")
    return {k: [v[s] for s in sorted(v)] for k, v in got.items()}


def check_events(events, ids, done, scale_events):
    """Attempts of one task never overlapping in time (from each one's
    `claimed` phase, stamped as it begins, to its last event); no prompt
    answered twice in an attempt, and each recorded session answering
    first, second and third, in order; and the sessions' restarts, each
    laid to the scale event that caused it (restarts()). Returns the
    problems found."""
    bad, spans = [], {}
    for (task, attempt), evs in events.items():
        begun = [e["ts"] for e in evs
                 if e["type"] == "phase" and e["payload"].get("phase") == "claimed"]
        wid = [e["payload"].get("worker") for e in evs
               if e["type"] == "phase" and e["payload"].get("phase") == "received"]
        spans.setdefault(task, []).append((begun[0] if begun else evs[0]["ts"],
                                           evs[-1]["ts"], attempt, wid[0] if wid else None))
        said = [e["payload"].get("text", "").split("you said ", 1)[-1] for e in evs
                if e["type"] == "message" and e.get("source") == "agent"
                and e["payload"].get("text", "").startswith("turn ")]
        if len(said) != len(set(said)):
            bad.append(f"{task} attempt {attempt}: a prompt answered twice: {said}")
        st = done.get(task)
        if task in ids and st and st.get("done_attempt") == attempt and \
                said != ["first", "second", "third"]:
            bad.append(f"{task} attempt {attempt} (recorded): answered {said}")
    for task, sp in spans.items():
        sp.sort()
        for (s1, e1, a1, _), (s2, e2, a2, _) in zip(sp, sp[1:]):
            if s2 < e1:
                bad.append(f"{task}: attempts {a1} and {a2} ran at once ({s2} < {e1})")
    return bad + restarts(spans, ids, scale_events)


def restarts(spans, ids, scale_events):
    """Each session's restart (an attempt after its first), laid to the
    last scale event before it that involved its worker: a worker stopped
    or killed (or on a host cut off) that ran the attempt before, else a
    worker added that ran the new one. Such a session's partition moved,
    with the worker the event concerned. Printed per event, with those
    the fleet's start caused (eight workers joining one by one), those
    moved between workers no event concerned (a rebalance may move others
    too), and those restarted by the worker process that ran them before
    (their partition was taken away, the session stopped, and it came
    back in a later rebalance: two rebalances racing). Returns no
    problems: what a scale event costs is a figure, not a pass mark."""
    caused = [0] * len(scale_events)
    start = aside = back = 0
    for t in ids:
        sp = sorted(spans.get(t, []))
        for (_, _, _, before), (at, _, a, now) in zip(sp, sp[1:]):
            if not scale_events or at < scale_events[0][0]:
                start += 1
                continue
            # the worker it left first: a kill's restarts come a lease and
            # a group session later, often onto a worker added meanwhile
            gone = [k for k, (t0, what, who) in enumerate(scale_events)
                    if t0 <= at and not what.startswith("added") and before in who]
            came = [k for k, (t0, what, who) in enumerate(scale_events)
                    if t0 <= at and what.startswith("added") and now in who and now != before]
            k = (gone or came or [None])[-1]
            if k is not None:
                caused[k] += 1
            elif now == before:
                back += 1
            else:
                aside += 1
    print(f"  sessions restarted while the fleet started: {start}")
    for k, (at, what, _) in enumerate(scale_events):
        print(f"  event {k + 1:2d} {what:28s} sessions restarted by it: {caused[k]}")
    print(f"  sessions restarted moving between workers no event concerned: {aside}")
    print(f"  sessions restarted where they ran (partition taken away, given back): {back}")
    return []

def run(f):
    f.redis()
    f.topics()
    f.bucket()
    f.recipe()
    f.wire()
    for h in range(HOSTS):
        for _ in range(WORKERS_PER_HOST):
            f.start_worker(h)
    ids = [f"fleet-{f.tag}-{i}" for i in range(SESSIONS)]
    for i in ids:
        f.cli("submit", "--interactive", "--id", i, "--recipe", f.recipe_url, "--commit",
              f.commit, "--prompt", "first", "--limit", "wall_seconds=3600")
    print(f"test_fleet: {SESSIONS} sessions submitted to {len(f.workers)} workers on "
          f"{HOSTS} hosts", flush=True)
    time.sleep(10)
    rng = random.Random(f.tag)
    sent = {i: 0 for i in ids}
    oneshots, scale_events = [], []
    cut = None
    for e in range(EVENTS):
        kind = e % 4
        if e == EVENTS // 2:
            print("test_fleet: event %d: the Redis master dies" % (e + 1), flush=True)
            scale_events.append((int(time.time() * 1000), "Redis master killed", set()))
            f.master.kill()
            f.master.wait()
        if cut is not None:
            f.heal(cut)
            cut = None
        live = sorted(f.workers)
        at = int(time.time() * 1000)
        if kind == 0 or len(live) <= HOSTS:
            h = rng.randrange(HOSTS)
            name = f.start_worker(h)
            what, who = "added " + name, {f.workers[name][1].wid}
        elif kind == 1:
            name = rng.choice(live)
            who = {f.workers[name][1].wid}
            f.stop_worker(name, signal.SIGTERM)
            what = "stopped " + name
        elif kind == 2:
            name = rng.choice(live)
            who = {f.workers[name][1].wid}
            f.stop_worker(name, signal.SIGKILL)
            what = "killed " + name
        else:
            cut = rng.randrange(HOSTS)
            who = {p.wid for h, p in f.workers.values() if h == cut}
            f.cut(cut)
            what = f"cut host {cut} off"
        scale_events.append((at, what, who))
        print(f"test_fleet: event {e + 1}: {what} ({len(f.workers)} workers)", flush=True)
        # a follow-up to some sessions between events (each gets 1 and 2),
        # and a stream of one-shot tasks
        for i in rng.sample(ids, 10):
            if sent[i] < 2:
                sent[i] += 1
                f.cli("send", "--seq", str(sent[i]), i, ["second", "third"][sent[i] - 1])
        for _ in range(ONESHOTS_PER_EVENT):
            o = f"fleet-{f.tag}-one-{len(oneshots)}"
            oneshots.append(o)
            f.cli("submit", "--id", o, "--recipe", f.recipe_url, "--commit", f.commit,
                  "--prompt", "once")
        time.sleep(4)
    if cut is not None:
        f.heal(cut)
    for h in range(HOSTS):  # every host runs a worker at the end
        if not any(v[0] == h for v in f.workers.values()):
            f.start_worker(h)
    for i in ids:
        while sent[i] < 2:
            sent[i] += 1
            f.cli("send", "--seq", str(sent[i]), i, ["second", "third"][sent[i] - 1])
        f.cli("end", "--seq", "3", i)
    every = ids + oneshots
    done, states = {}, {}
    deadline = time.monotonic() + 600
    while len(done) < len(every) and time.monotonic() < deadline:
        for i in every:
            if i in done:
                continue
            out = f.cli("status", "--json", i, ok=(0, 5))  # 5: not seen yet
            st = json.loads(out) if out.strip() else {"state": "unseen"}
            states[i] = st.get("state")
            if st.get("state") in ("done", "dead-lettered"):
                done[i] = st
        if len(done) < len(every):
            time.sleep(5)
    bad, replayed, dead = [], 0, 0
    for i in every:
        st = done.get(i)
        if not st:
            bad.append(f"{i}: not done ({states.get(i)})")
            continue
        if st["state"] != "done":
            dead += 1
            bad.append(f"{i}: {st['state']}")
            continue
        m = st["manifest"]
        man = f.manifest(st["manifest_key"])
        session = i in sent
        replayed += session and st["done_attempt"] > 1
        turns = (3, 3) if session else (None, None)
        if (m.get("outcome") != "succeeded" or [v["outcome"] for v in m["verdicts"]] != ["pass"]
                or (man.get("turns"), man.get("followups")) != turns):
            bad.append(f"{i}: {m.get('outcome')} {m.get('verdicts')} turns {man.get('turns')} "
                       f"followups {man.get('followups')}")
    for name in sorted(f.workers):
        f.stop_worker(name, signal.SIGTERM)
    events = read_events(f)
    bad += check_events(events, set(ids), done, scale_events)
    for i in every:  # the recorded attempt's events, whole
        st = done.get(i)
        if st and st["state"] == "done" and not events.get((i, st["done_attempt"])):
            bad.append(f"{i}: no events of its recorded attempt {st['done_attempt']}")
    print(f"fleet submitted {len(every)} ({SESSIONS} sessions, {len(oneshots)} one-shot) / "
          f"done {len(done) - dead} / lost {len(every) - len(done)} / dead-lettered {dead} / "
          f"sessions replayed {replayed}", flush=True)
    if bad:
        print("test_fleet: FAILED:\n  " + "\n  ".join(bad[:20]))
        return 1
    return 0


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    if os.geteuid() != 0:
        skip("needs root")
    for tool in ("ip", "iptables", "nsenter", "sysctl", "redis-server", "redis-cli", "git"):
        if not shutil.which(tool):
            skip(f"needs {tool}")
    for var in ("TASKBOX_TEST_KAFKA", "TASKBOX_TEST_S3_ENDPOINT", "TASKBOX_TEST_S3_REGION",
                "TASKBOX_TEST_S3_ACCESS_KEY", "TASKBOX_TEST_S3_SECRET_KEY"):
        if not os.environ.get(var):
            skip(f"needs {var} (deploy/local/services env)")
    try:
        import boto3  # noqa: F401
        import confluent_kafka  # noqa: F401
        import msgpack  # noqa: F401
    except ImportError as e:
        skip(str(e))
    os.environ["AWS_ACCESS_KEY_ID"] = os.environ["TASKBOX_TEST_S3_ACCESS_KEY"]
    os.environ["AWS_SECRET_ACCESS_KEY"] = os.environ["TASKBOX_TEST_S3_SECRET_KEY"]
    f = Fleet(sys.argv[1], sys.argv[2])
    try:
        rc = run(f)
    finally:
        if os.environ.get("TB_FLEET_KEEP"):
            print(f"test_fleet: kept {f.dir}")
            f.dir = "/nonexistent-kept"
        f.close()
    sys.exit(rc)


if __name__ == "__main__":
    main()
