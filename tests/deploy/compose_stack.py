#!/usr/bin/env python3
"""deploy/compose/compose.yaml brought up by Debian 12's podman-compose
(1.0.3, as root), as deploy/README.md's "The local stack" says, with the
variables that name local images instead of the registry's:

  TASKBOX_KAFKA_IMAGE      tests/deploy/standins/kafka: Debian 12's
                           OpenJDK and the Kafka jars deploy/local/services
                           fetched, configured from KAFKA_* as apache/kafka
  TASKBOX_REDIS_IMAGE      tests/deploy/standins/redis: Debian 12's Redis
                           (7.0, with Sentinel), protected mode off as in
                           the official image
  TASKBOX_SEAWEEDFS_IMAGE  tests/deploy/standins/seaweedfs: the weed binary
                           deploy/local/services built, chrislusf/seaweedfs's
                           entrypoint contract
  TASKBOX_WORKER_IMAGE     deploy/container/Dockerfile, built on a Debian 12
                           base from the archive (podman.worker_image)

Each is built on a base made by tests/deploy/podman.py and cached (its
tag is a hash of what goes into it). podman runs with the settings
deploy/README.md gives for a host like this one, in a containers.conf of
the test's own (CONTAINERS_CONF): runc, and explicit open-file and
process limits.

Then, under a project name of its own (tbcompose<pid>): both workers
ready (/readyz 200 on the port `podman port` names), the one-shot topics
and bucket jobs exited 0, every healthcheck of the compose file passing
when run (`podman healthcheck run`: with no systemd, podman schedules
none), a task submitted from the host with the host's taskbox through
the published ports (Kafka 29092, Redis 26379, S3 28333) done with its
artifact; then the Redis master's container stopped: a sentinel promotes
the replica, the workers (still running, not restarted) are ready again
and take a second task from the host, whose done-marker and artifact a
client on the compose network reads through the sentinels. Last,
`podman-compose down -v`, and nothing of the project left (containers,
network, volumes), also when a check fails or SIGTERM comes.

Figures: `up` to both workers ready, the master's stop to the replica
promoted, and to the workers ready on it.

Usage: compose_stack.py SOURCE_DIR TASKBOX (the host's, to submit).
Skips (77) without root, podman, runc, mmdebstrap, podman-compose, the
CNI dnsname plugin (the containers find each other by service name), the
Kafka jars or weed binary deploy/local/services installs, or with the
stack's host ports taken.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import podman as pm  # noqa: E402
from taskrun import artifact_get, report, result_of, submit_wait  # noqa: E402

check = pm.check
HERE = os.path.dirname(os.path.abspath(__file__))
COMPOSE = "deploy/compose/compose.yaml"
PREFIX = "tbcompose"
PORTS = {29092: "Kafka", 26379: "Redis", 28333: "S3"}
LABEL = "io.podman.compose.project"


def tools(src):
    """The Kafka jars' directory and the weed binary deploy/local/services
    installs (its TB_TOOLS and versions), or skip."""
    text = open(os.path.join(src, "deploy/local/services")).read()
    kafka = re.search(r"^KAFKA_VERSION=(\S+)", text, re.M).group(1)
    weed = re.search(r"^WEED_VERSION=(\S+)", text, re.M).group(1)
    root = os.environ.get("TB_TOOLS", "/opt/taskbox-tools")
    jars, binary = os.path.join(root, f"kafka-{kafka}"), os.path.join(root, "bin", f"weed-{weed}")
    if not os.path.exists(os.path.join(jars, ".complete")):
        pm.skip(f"no Kafka jars in {jars} (deploy/local/services start kafka fetches them)")
    if not os.access(binary, os.X_OK):
        pm.skip(f"no {binary} (deploy/local/services start s3 builds it)")
    return jars, binary


def standin(kind, base, extra):
    """tests/deploy/standins/@p kind built on @p base with @p extra
    ({name in the context: host path}) added to its context; cached
    under a tag hashing all of it. @return the tag."""
    d = os.path.join(HERE, "standins", kind)
    h = hashlib.sha256(base.encode())
    for root, _, files in sorted(os.walk(d)):
        for f in sorted(files):
            p = os.path.join(root, f)
            h.update(os.path.relpath(p, d).encode() + b"\0" + open(p, "rb").read())
    for name, path in sorted(extra.items()):
        paths = [path] if os.path.isfile(path) else sorted(
            os.path.join(path, f) for f in os.listdir(path) if f.endswith(".jar"))
        for p in paths:
            st = os.stat(p)
            h.update(f"{name}\0{os.path.basename(p)}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    repo = f"localhost/taskbox-test/compose-{kind}"
    tag = f"{repo}:{h.hexdigest()[:16]}"
    with pm._lock(f"compose-{kind}"):
        if pm.podman("image", "exists", tag, check=False).returncode == 0:
            pm.log(f"image {tag}: cached")
            return tag
        t0 = time.monotonic()
        ctx = tempfile.mkdtemp(prefix=f"tb-standin-{kind}-")
        try:
            shutil.copytree(d, ctx, dirs_exist_ok=True)
            for name, path in extra.items():
                dst = os.path.join(ctx, name)
                if os.path.isfile(path):
                    shutil.copy2(path, dst)
                else:
                    os.makedirs(dst)
                    for f in os.listdir(path):
                        if f.endswith(".jar"):
                            shutil.copy2(os.path.join(path, f), dst)
            pm.podman("build", *pm.limits(), "--build-arg", f"BASE={base}", "-t", tag, ctx,
                      timeout=1200)
        finally:
            shutil.rmtree(ctx, ignore_errors=True)
        # the earlier builds of this stand-in (a changed fixture), unless in use
        r = pm.podman("images", "--format", "{{.Repository}}:{{.Tag}}", repo, check=False)
        for old in (r.stdout or "").split():
            if old != tag:
                pm.podman("rmi", old, check=False)
        pm.log(f"image {tag}: built in {time.monotonic() - t0:.0f} s")
        return tag


def images(src):
    """The variables naming the four local images: the stand-ins and the
    worker."""
    jars, weed = tools(src)
    # OpenJDK's postinst links its manual page into /usr/share/man/man1,
    # which the slim image's dpkg options leave out: made before it
    base = pm.base_image("compose-standins", ["openjdk-17-jre-headless", "redis-server",
                                              "redis-tools", "wget"],
                         before=['mkdir -p "$1/usr/share/man/man1"'])
    return {"TASKBOX_KAFKA_IMAGE": standin("kafka", base, {"libs": jars}),
            "TASKBOX_REDIS_IMAGE": standin("redis", base, {}),
            "TASKBOX_SEAWEEDFS_IMAGE": standin("seaweedfs", base, {"weed": weed}),
            "TASKBOX_WORKER_IMAGE": pm.worker_image(src)[0]}


def containers_conf(path):
    """What deploy/README.md has a host like this one put in
    containers.conf: runc, and limits within the hard ones."""
    lim = pm.limits()
    with open(path, "w") as f:
        f.write("[containers]\n"
                f"default_ulimits = [\"{lim[1]}\", \"{lim[3]}\"]\n"
                "[engine]\n"
                "runtime = \"runc\"\n")
    return path


def build_command(stack, env):
    """What `podman-compose build` would run for the worker (--dry-run):
    the Dockerfile, from the repository, on TASKBOX_BASE_IMAGE, tagged
    TASKBOX_WORKER_IMAGE. (The test's image is built by podman.py, as
    deploy/README.md's "The image" says, labelled and pruned.)"""
    r = subprocess.run(["podman-compose", "--dry-run", "-p", stack.project, "-f", COMPOSE, "build",
                        "worker"], cwd=stack.src, env=env, capture_output=True, text=True,
                       timeout=120)
    want = (f"podman build -t {env['TASKBOX_WORKER_IMAGE']} -f ../../deploy/container/Dockerfile "
            f"--build-arg BASE={env['TASKBOX_BASE_IMAGE']} ../..")
    check(want in r.stdout.splitlines(), "podman-compose would build the worker from the "
          "Dockerfile on TASKBOX_BASE_IMAGE", f"wanted `{want}`, got\n{r.stdout[-800:]}{r.stderr[-400:]}")


def require():
    pm.require()
    for t in ("podman-compose", "git"):
        if not shutil.which(t):
            pm.skip(f"no {t} (deploy/local/install-deps test installs it)")
    backend = pm.podman("info", "--format", "{{.Host.NetworkBackend}}", check=False).stdout.strip()
    if backend == "cni" and not any(os.path.exists(os.path.join(d, "dnsname")) for d in
                                    ("/usr/lib/cni", "/usr/libexec/cni", "/opt/cni/bin")):
        pm.skip("podman's CNI networks have no dnsname plugin, so the stack's containers cannot "
                "find each other by service name (golang-github-containernetworking-plugin-"
                "dnsname, deploy/local/install-deps test)")


def ports_free():
    """The stack's host ports free, or skip (a stack of this test's left
    by a killed run is removed first: Stack.reap)."""
    import socket
    for port, what in PORTS.items():
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            pm.skip(f"port {port} ({what} of the stack) is taken: {e} (another stack up?)")
        finally:
            s.close()


class Stack:
    """One podman-compose project: up, and down with everything it made
    gone, whatever happened in between."""

    def __init__(self, src, env, logdir):
        self.src, self.env, self.logdir = src, env, logdir
        self.project = f"{PREFIX}{os.getpid()}"

    @staticmethod
    def reap():
        """Projects left by runs of this test that are gone (killed by
        ctest's timeout, say): tbcompose<pid> with no such process."""
        r = pm.podman("ps", "-a", "--format", "{{index .Labels \"" + LABEL + "\"}}", check=False)
        r2 = pm.podman("volume", "ls", "--format", "{{index .Labels \"" + LABEL + "\"}}",
                       check=False)
        r3 = pm.podman("network", "ls", "--format", "{{.Name}}", check=False)
        names = set((r.stdout or "").split()) | set((r2.stdout or "").split())
        names |= {n[:-len("_default")] for n in (r3.stdout or "").split() if n.endswith("_default")}
        for p in sorted(names):
            m = re.fullmatch(PREFIX + r"(\d+)", p)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                pm.log(f"removing {p}, left by a run that is gone")
                Stack.purge(p)

    @staticmethod
    def purge(project):
        """Every container, volume and the network of @p project."""
        r = pm.podman("ps", "-a", "-q", "--filter", f"label={LABEL}={project}", check=False)
        for cid in (r.stdout or "").split():
            pm.podman("rm", "-f", "-t", "0", cid, check=False)
        r = pm.podman("volume", "ls", "-q", "--filter", f"label={LABEL}={project}", check=False)
        for v in (r.stdout or "").split():
            pm.podman("volume", "rm", "-f", v, check=False)
        pm.podman("network", "rm", "-f", f"{project}_default", check=False)

    def compose(self, *args, timeout=600):
        """podman-compose -p PROJECT -f compose.yaml ARGS; its output (a
        screenful of podman commands) goes to a log; @return the result."""
        argv = ["podman-compose", "-p", self.project, "-f", COMPOSE, *args]
        with open(os.path.join(self.logdir, "compose.log"), "a") as log:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            return subprocess.run(argv, cwd=self.src, env=self.env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=timeout)

    def name(self, service, n=1):
        return f"{self.project}_{service}_{n}"

    def logs(self, service, n=1, tail=40):
        r = pm.podman("logs", "--tail", str(tail), self.name(service, n), check=False)
        return (r.stdout or "") + (r.stderr or "")

    def left(self, network=True):
        """What of the project is still there."""
        r = pm.podman("ps", "-a", "--format", "{{.Names}}", "--filter",
                      f"label={LABEL}={self.project}", check=False)
        v = pm.podman("volume", "ls", "--format", "{{.Name}}", "--filter",
                      f"label={LABEL}={self.project}", check=False)
        n = pm.podman("network", "exists", f"{self.project}_default", check=False)
        return (r.stdout or "").split() + (v.stdout or "").split() + (
            [f"{self.project}_default"] if network and n.returncode == 0 else [])

    def down(self):
        """deploy/README.md's two commands: podman-compose's down, which
        leaves the project's network (1.0.3 does), then the network."""
        t0 = time.monotonic()
        r = self.compose("down", "-v", "-t", "150", timeout=1200)
        left = self.left(network=False)
        check(r.returncode == 0 and not left, "podman-compose down -v removed the containers and "
              f"volumes in {time.monotonic() - t0:.0f} s", f"exit {r.returncode}, left {left}")
        n = pm.podman("network", "rm", f"{self.project}_default", check=False)
        left = self.left()
        check(n.returncode == 0 and not left, "podman network rm removed the network, the last "
              "of the stack", f"{n.stderr.strip()}; left {left}")
        if left:
            self.purge(self.project)


def exec_out(name, *cmd, timeout=60):
    r = pm.podman("exec", name, *cmd, check=False, timeout=timeout)
    return r.returncode, (r.stdout or "") + (r.stderr or "")


def ready_url(stack, n):
    """http://127.0.0.1:PORT/readyz of worker @p n, or None while podman
    names no port."""
    r = pm.podman("port", stack.name("worker", n), "9464", check=False)
    out = (r.stdout or "").strip().splitlines()
    return f"http://{out[0].strip()}/readyz" if r.returncode == 0 and out else None


def wait_ready(stack, what, secs):
    """Both workers' /readyz 200, within @p secs; @return the seconds."""
    t0 = time.monotonic()

    def both():
        urls = [ready_url(stack, n) for n in (1, 2)]
        return all(u and pm.http_get(u, 1)[0] == 200 for u in urls)
    try:
        pm.wait_for(what, both, secs, 0.5)
    except TimeoutError:
        for n in (1, 2):
            u = ready_url(stack, n)
            pm.log(f"worker {n}: {u}: {pm.http_get(u) if u else 'no port'}\n"
                   f"{stack.logs('worker', n, 25)}")
        raise
    return time.monotonic() - t0


def jobs_done(stack):
    """The one-shot jobs exited 0 (within 3 minutes)."""
    for job in ("topics", "bucket"):
        n = stack.name(job)

        def exited():
            r = pm.podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", n,
                          check=False)
            s = (r.stdout or "").split()
            return s if s and s[0] in ("exited", "stopped") else None
        try:
            (_, code), _ = pm.wait_for(f"{job} job exited", exited, 180, 1)
        except TimeoutError as e:
            check(False, f"the {job} job ended", f"{e}\n{stack.logs(job)}")
            continue
        check(code == "0", f"the {job} job exited 0", f"exit {code}\n{stack.logs(job)}")


def healthchecks(stack):
    """Each service's healthcheck, run once by hand, passes: the
    stand-ins have what the compose file's checks call."""
    for svc in ("kafka", "redis", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3", "s3"):
        r = pm.podman("healthcheck", "run", stack.name(svc), check=False, timeout=120)
        check(r.returncode == 0, f"{svc}'s healthcheck passes",
              f"exit {r.returncode}: {r.stdout}{r.stderr}\n{stack.logs(svc, 15)}")


def sentinel_master(stack):
    """The master sentinel-1 names now (host), or None."""
    rc, out = exec_out(stack.name("sentinel-1"), "redis-cli", "-p", "26379", "sentinel",
                       "get-master-addr-by-name", "taskbox", timeout=10)
    return out.split()[0] if rc == 0 and out.split() else None


class Client:
    """The host's taskbox against the stack's published ports, with
    compose/worker.json's topics, prefix and bucket, and s3.json's keys."""

    def __init__(self, src, taskbox, d):
        self.taskbox, self.dir = taskbox, d
        w = json.load(open(os.path.join(src, "deploy/compose/worker.json")))
        cred = json.load(open(os.path.join(src, "deploy/compose/s3.json")))
        cred = cred["identities"][0]["credentials"][0]
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID=cred["accessKey"],
                        AWS_SECRET_ACCESS_KEY=cred["secretKey"], LSAN_OPTIONS="detect_leaks=0")
        self.config = os.path.join(d, "client.json")
        with open(self.config, "w") as f:
            json.dump({"v": 1,
                       "kafka": dict(w["kafka"], brokers="127.0.0.1:29092"),
                       "ledger": {"url": "redis://127.0.0.1:26379", "prefix": w["ledger"]["prefix"]},
                       "store": dict(w["store"], endpoint="http://127.0.0.1:28333")}, f)

    def submit(self, task_id, recipe, timeout=180):
        return submit_wait(self.taskbox, self.config, self.env, task_id, recipe, timeout=timeout)

    def artifact(self, task_id, path):
        return artifact_get(self.taskbox, self.config, self.env, self.dir, task_id, path)


def recipe(src, d, stack):
    """examples/recipes/hello as a git repository under @p d, copied into
    both workers at the same path (its file:// URL names it there too);
    @return (URL, commit)."""
    repo = os.path.join(d, "recipes", "hello")
    shutil.copytree(os.path.join(src, "examples/recipes/hello"), repo)
    git = f"git -C {repo} -c user.name=t -c user.email=t@t"
    pm.sh(f"git init -q {repo} && {git} add -A && {git} commit -qm hello")
    commit = pm.sh(f"git -C {repo} rev-parse HEAD").strip()
    for n in (1, 2):
        w = stack.name("worker", n)
        pm.podman("exec", w, "mkdir", "-p", os.path.dirname(repo))
        pm.podman("cp", repo, f"{w}:{repo}")
    return "file://" + repo, commit


def task(client, task_id, rec, what):
    """Submits a task from the host, waits for it; @return (whether it
    succeeded, the output)."""
    t0 = time.monotonic()
    rc, ev, out = client.submit(task_id, rec)
    res = result_of(ev)
    if not check(rc == 0 and res.get("outcome") == "succeeded",
                 f"{what}: the task from the host succeeded in {time.monotonic() - t0:.1f} s "
                 f"({res.get('outcome')})"):
        report("submit", rc, out)
    return rc == 0, out


def started(stack):
    """{worker: "StartedAt|RestartCount|Running"}."""
    out = {}
    for n in (1, 2):
        r = pm.podman("inspect", "--format", "{{.State.StartedAt}}|{{.RestartCount}}|"
                      "{{.State.Running}}", stack.name("worker", n), check=False)
        out[n] = (r.stdout or "").strip()
    return out


def failover(stack, client, rec):
    master, replica = stack.name("redis"), stack.name("redis-replica")
    check(sentinel_master(stack) == "redis", "the sentinels name the redis service the master",
          f"they name {sentinel_master(stack)}")
    before = started(stack)
    t0 = time.monotonic()
    pm.podman("stop", "-t", "10", master, timeout=60)
    stopped = time.monotonic() - t0
    try:
        _, took = pm.wait_for("a sentinel promotes redis-replica",
                              lambda: sentinel_master(stack) == "redis-replica", 90, 0.5)
    except TimeoutError as e:
        check(False, "a sentinel promoted the replica", f"{e}\n{stack.logs('sentinel-1', 30)}")
        return
    took += stopped
    rc, role = exec_out(replica, "redis-cli", "role", timeout=10)
    check(role.split()[:1] == ["master"], f"redis-replica promoted {took:.1f} s after the master's "
          "stop, and says it is the master", role)
    pm.log(f"figure: failover {took:.1f} s from the master's stop to the replica promoted")
    wait_ready(stack, "both workers ready after the failover", 120)
    pm.log(f"figure: workers ready {time.monotonic() - t0:.1f} s after the master's stop")
    check(True, "both workers ready after the failover")
    task_id = f"{stack.project}-after"
    ok, out = task(client, task_id, rec, "after the failover")
    # the host's client names the published port, the stopped master's:
    # its wait settles on the events alone (follow.c, LEDGER_PATIENCE_MS)
    check("is settled by its events alone" in out,
          "the host's client, its ledger gone with the master, said it went by the events",
          out[-600:])
    if ok:
        # the host reaches the stopped master's port only: a client on the
        # compose network reads the ledger through the sentinels
        w = stack.name("worker", 1)
        rc, out = exec_out(w, "taskbox", "artifacts", "get", "--config",
                           "/etc/taskbox/compose/worker.json", "--output", "/tmp/after.txt",
                           task_id, "hello.txt", timeout=120)
        text = exec_out(w, "cat", "/tmp/after.txt")[1] if rc == 0 else out
        check(rc == 0 and "hello, queue!" in text,
              "its done-marker and output, read through the sentinels on the compose network",
              f"exit {rc}: {text}")
        rc, keys = exec_out(replica, "redis-cli", "--scan", "--pattern", f"*{task_id}*",
                            timeout=10)
        check(rc == 0 and keys.strip(), "its ledger keys are on the promoted replica", keys)
    after = started(stack)
    check(after == before and all(v.endswith("|true") for v in after.values()),
          "the workers carried on: running, neither restarted", f"{before} -> {after}")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    src, taskbox = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    require()
    Stack.reap()
    ports_free()
    tools(src)
    t_all = time.monotonic()
    env_images = images(src)
    d = tempfile.mkdtemp(prefix="tb-compose-")
    os.chmod(d, 0o711)
    env = dict(os.environ, CONTAINERS_CONF=containers_conf(os.path.join(d, "containers.conf")),
               TASKBOX_BASE_IMAGE=pm.worker_base(), **env_images)
    stack = Stack(src, env, d)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        build_command(stack, env)
        t0 = time.monotonic()
        r = stack.compose("up", "-d", timeout=900)
        check(r.returncode == 0, f"podman-compose up -d returned in {time.monotonic() - t0:.0f} s",
              f"exit {r.returncode}")
        wait_ready(stack, "both workers ready", 300)
        up = time.monotonic() - t0
        check(True, f"both workers ready {up:.0f} s after `up`")
        pm.log(f"figure: stack up to both workers ready {up:.1f} s")
        jobs_done(stack)
        healthchecks(stack)
        client = Client(src, taskbox, d)
        rec = recipe(src, d, stack)
        task_id = f"{stack.project}-first"
        if task(client, task_id, rec, "the first")[0]:
            text, why = client.artifact(task_id, "hello.txt")
            check(text and "hello, queue!" in text, "its output, fetched from the host, says hello",
                  repr(text) + why)
        failover(stack, client, rec)
    except Exception as e:  # noqa: BLE001: reported, then the stack goes
        check(False, "the run", f"{type(e).__name__}: {e}")
        for svc in ("kafka", "redis-replica", "sentinel-1", "s3", "worker"):
            pm.log(f"--- {svc}\n{stack.logs(svc, tail=20)}")
        try:
            pm.log("--- compose.log\n" + open(os.path.join(d, "compose.log")).read()[-3000:])
        except OSError:
            pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.down()
        shutil.rmtree(d, ignore_errors=True)
    pm.log(f"\n{len(pm.failures)} failed; {time.monotonic() - t_all:.0f} s in all")
    return 1 if pm.failures else 0


if __name__ == "__main__":
    sys.exit(main())
