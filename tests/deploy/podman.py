"""What the container tests share: Debian 12's podman as root, base images
made from Debian's archive (no registry is reachable where the suite
runs) and cached between runs, the worker image built once, and
containers that are always removed.

The engine, as this project's test machines need it (deploy/README.md,
"The image", says the same for operators):
  - `--runtime runc`: Debian 12's crun refuses a cgroup v1 or hybrid host;
  - explicit `--ulimit nofile=N:N --ulimit nproc=M:M` on every run and
    build, within the caller's hard limits: podman's defaults (1048576)
    are refused without CAP_SYS_RESOURCE. podman lowers its own
    RLIMIT_NPROC to 32768 before it starts a container, so nproc is
    at most that.

Base images: `mmdebstrap` makes a Debian 12 root (minbase, merged /usr
without the usrmerge package, like debian:bookworm-slim), `podman
import` makes it an image tagged localhost/taskbox-test/<kind>:<key>,
where the key is a hash of everything that goes into it (suite, mirrors,
package list, options). The tarball is kept in $TB_TEST_CACHE
(/var/cache/taskbox-tests) and the image in podman's store, so a second
run of the suite on the same machine makes neither again; a lock file
serialises tests that want the same one. Remove the directory and the
images (`podman rmi` of localhost/taskbox-test/*) to start afresh.

Containers: every one is named tbtest-<what>-<pid> and labelled with the
pid of the test that made it; `Containers` removes its own on exit, and
on start any whose test is gone (killed by ctest's timeout, say), never
another live test's.
"""
import fcntl
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

CACHE = os.environ.get("TB_TEST_CACHE", "/var/cache/taskbox-tests")
SUITE = "bookworm"
MIRRORS = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
]
# like the official slim images: no manual pages, documentation (but the
# copyrights) or translations
DPKG_OPTS = [
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
]
LABEL = "org.taskbox.test.pid"


failures = []


def log(*a):
    print(*a, flush=True)


def check(cond, what, why=""):
    """One line per check, FAIL with @p why; counted in failures."""
    log(("ok    " if cond else "FAIL  ") + what + ("" if cond else f": {why}"))
    if not cond:
        failures.append(what)
    return cond


def skip(why):
    print(f"skipped: {why}", flush=True)
    sys.exit(77)


def limits():
    """The --ulimit flags: the hard limits of this process, nproc at most
    podman's own 32768."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else nofile
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def podman(*args, check=True, capture=True, timeout=600, **kw):
    """podman ARGS with the runtime this host needs; @return the result."""
    argv = ["podman", "--runtime", "runc", *args]
    r = subprocess.run(argv, capture_output=capture, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)[:300]}: exit {r.returncode}\n"
                           f"{(r.stdout or '')[-2000:]}{(r.stderr or '')[-2000:]}")
    return r


def require():
    """Skips (77) where the tests cannot run: not root, no podman, runc or
    mmdebstrap, or a kernel without what a privileged worker container
    needs (overlay, FUSE, user namespaces)."""
    if os.geteuid() != 0:
        skip("podman as root (a worker container is privileged in the host's user namespace)")
    for t in ("podman", "runc", "mmdebstrap"):
        if not shutil.which(t):
            skip(f"no {t} (deploy/local/install-deps test installs it)")
    fs = open("/proc/filesystems").read()
    if "overlay" not in fs:
        skip("the kernel has no overlay file system (podman's storage)")
    if not os.path.exists("/dev/fuse") or "fuse" not in fs:
        skip("the kernel has no FUSE (/dev/fuse): lazy inputs cannot be served")
    if subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode != 0:
        skip("no user namespaces here (unshare -U fails): no sandbox can be built")


def _lock(name):
    os.makedirs(CACHE, exist_ok=True)
    f = open(os.path.join(CACHE, name + ".lock"), "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def base_image(kind, packages=(), hooks=(), change=(), before=()):
    """A Debian 12 image from the archive: minbase plus @p packages, made
    once per key. @p hooks: mmdebstrap customize hooks (after the
    packages), @p before: essential hooks (before them). @p change:
    `podman import --change` instructions (CMD, ...). @return its tag."""
    hookdir = "/usr/share/mmdebstrap/hooks/merged-usr"
    argv = ["mmdebstrap", "--variant=minbase", "--format=tar", f"--hook-dir={hookdir}",
            "--aptopt=APT::Install-Recommends \"false\""]
    argv += [f"--dpkgopt={o}" for o in DPKG_OPTS]
    if packages:
        argv.append("--include=" + ",".join(sorted(packages)))
    argv += [f"--essential-hook={h}" for h in before]
    argv += [f"--customize-hook={h}" for h in hooks]
    recipe = json.dumps({"argv": argv, "suite": SUITE, "mirrors": MIRRORS, "change": list(change)})
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    tag = f"localhost/taskbox-test/{kind}:{key}"
    with _lock(f"{kind}-{key}"):
        if podman("image", "exists", tag, check=False).returncode == 0:
            log(f"base {tag}: cached")
            return tag
        tar = os.path.join(CACHE, f"{kind}-{key}.tar")
        if not os.path.exists(tar):
            t0 = time.monotonic()
            r = subprocess.run(argv + [SUITE, tar + ".part"] + MIRRORS, capture_output=True,
                               text=True, timeout=1200)
            if r.returncode != 0:
                raise RuntimeError(f"mmdebstrap {kind}: exit {r.returncode}\n{r.stderr[-3000:]}")
            os.rename(tar + ".part", tar)
            log(f"base {kind}: mmdebstrap {time.monotonic() - t0:.0f} s")
        args = ["import"]
        for c in change:
            args += ["--change", c]
        podman(*args, tar, tag)
        log(f"base {tag}: imported from {tar}")
        return tag


def worker_base():
    """The Dockerfile's local base, standing in for debian:bookworm-slim."""
    return base_image("base")


def worker_image(src):
    """deploy/container/Dockerfile built from @p src on worker_base(), as
    deploy/README.md says; podman's layer cache keeps what did not
    change. @return (tag, seconds the build took).

    Each build for a new commit leaves the last one's images untagged
    (the build stage's among them, 1 GB of which only the compile is its
    own). The build stage is tagged too, so that its package layers stay
    cached, and the untagged images of this tree's earlier builds (by
    their label) are removed after each build; other images are left
    alone."""
    base = worker_base()
    rev = subprocess.run(["git", "-C", src, "rev-parse", "--short=12", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "unknown"
    key = hashlib.sha256(src.encode()).hexdigest()[:12]
    tag = f"localhost/taskbox-test/worker:{key}"
    label = f"org.taskbox.test.worker={key}"
    args = [*limits(), "--label", label, "--build-arg", f"BASE={base}",
            "--build-arg", f"TASKBOX_REVISION={rev}", "-f", "deploy/container/Dockerfile"]
    with _lock("worker-" + key):
        t0 = time.monotonic()
        podman("build", *args, "--target", "build", "-t", f"localhost/taskbox-test/worker-build:{key}",
               ".", cwd=src, timeout=1800)
        podman("build", *args, "-t", tag, ".", cwd=src, timeout=1800)
        took = time.monotonic() - t0
        podman("image", "prune", "-f", "--filter", f"label={label}", check=False)
    log(f"image {tag}: built in {took:.0f} s (from {base}, revision {rev})")
    return tag, took


class Containers:
    """The containers one test starts, removed when it ends (with, or
    without, an exception)."""

    def __init__(self, what):
        self.prefix, self.names = f"tbtest-{what}-{os.getpid()}", []
        self.reap()
        # SIGTERM unwinds like an exception, so that the containers go
        # (ctest's timeout kills outright: reap() in the next run is for that)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    @staticmethod
    def reap():
        """Removes containers left by tests that are gone."""
        r = podman("ps", "-a", "--filter", f"label={LABEL}", "--format",
                   "{{.ID}} {{index .Labels \"" + LABEL + "\"}}", check=False)
        for line in (r.stdout or "").splitlines():
            cid, _, pid = line.partition(" ")
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                podman("rm", "-f", "-t", "0", cid, check=False)

    def name(self, what):
        n = f"{self.prefix}-{what}"
        self.names.append(n)
        return n

    def run(self, what, *args, timeout=120):
        """podman run -d --name ... ARGS; @return the container's name."""
        n = self.name(what)
        podman("run", "-d", "--name", n, "--label", f"{LABEL}={os.getpid()}", *limits(), *args,
               timeout=timeout)
        return n

    def logs(self, n, tail=60):
        r = podman("logs", "--tail", str(tail), n, check=False)
        return (r.stdout or "") + (r.stderr or "")

    def remove(self, n):
        podman("rm", "-f", "-t", "0", n, check=False)
        if n in self.names:
            self.names.remove(n)

    def close(self):
        for n in list(self.names):
            self.remove(n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def http_get(url, timeout=2):
    """@return (status, body) of a GET, (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ValueError) as e:
        return 0, str(e)


def wait_for(what, probe, secs, step=0.1):
    """Calls @p probe until it returns a true value, at most @p secs;
    @return that value and the seconds it took, or raise naming @p what."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < secs:
        last = probe()
        if last:
            return last, time.monotonic() - t0
        time.sleep(step)
    raise TimeoutError(f"{what}: not within {secs} s")


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def services():
    """The test services' addresses (tests/run exports them), or skip."""
    need = ["TASKBOX_TEST_KAFKA", "TASKBOX_TEST_REDIS", "TASKBOX_TEST_S3_ENDPOINT",
            "TASKBOX_TEST_S3_ACCESS_KEY", "TASKBOX_TEST_S3_SECRET_KEY", "TASKBOX_TEST_S3_REGION"]
    missing = [n for n in need if not os.environ.get(n)]
    if missing:
        skip(f"no {', '.join(missing)} (deploy/local/services env; tests/run sets them)")
    return {n: os.environ[n] for n in need + ["TASKBOX_TEST_REGISTRY"] if n in os.environ}


def sh(cmd, **kw):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[:200]}: exit {r.returncode}\n{r.stdout[-1500:]}{r.stderr[-1500:]}")
    return r.stdout

