#!/usr/bin/env python3
"""The worker under systemd as an operator installs it, in Debian 12
containers with systemd as PID 1 (`podman run --systemd=always`,
privileged, on the host's network to reach the test services):

1. The Debian package: built as docs/releasing.md says, installed with
   `apt-get install ./taskbox_*.deb` (its dependencies from Debian's
   archive), then deploy/README.md "systemd" step by step: the edits it
   lists to /etc/taskbox/worker.json and worker.env, its `--check` line
   as written (0), `systemctl enable --now taskbox-worker`; ready on
   /readyz; a task submitted from the host done; a slow task running
   when `systemctl stop` comes: the stop waits for it (the drain), the
   task succeeds in its first attempt and the worker exits 0.
2. "From a build": deploy/README.md's block run line by line as written
   in a copy of the source tree (on a base with the build's packages),
   the same edits made before its `--check` line; a task done; stopped.

Besides the documented edits, worker.env points each worker at this
test's own topics, group and ledger prefix (TASKBOX_* variables, as
schemas/config.md allows), so that no other test's worker takes its
tasks. Figures: each step's time.

Usage: systemd_deb.py SOURCE_DIR TASKBOX (the host's, to submit).
Skips (77) as podman.require says, or without the services' addresses.
"""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import podman as pm  # noqa: E402
from taskrun import Run, drain_check, report, slow_recipe  # noqa: E402

check = pm.check
SYSTEMD = ["systemd", "systemd-sysv", "dbus"]
RECIPES = "/srv/tb-recipes"

def build_packages(src):
    """deploy/local/install-deps's build_pkgs."""
    script = (f'eval "$(sed -n "/^build_pkgs=(/,/^)/p" {src}/deploy/local/install-deps)"; '
              'echo "${build_pkgs[@]}"')
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          check=True).stdout.split()


def ex(c, cmd, timeout=300, env=()):
    """sh -c CMD in container @p c; @return the result (not checked)."""
    args = ["exec"]
    for e in env:
        args += ["-e", e]
    return pm.podman(*args, c, "sh", "-c", cmd, check=False, timeout=timeout)


def boot(cs, image, run, what):
    """A container booted to systemd's `running`; @return its name."""
    name = f"{cs.prefix}-{what}"
    cs.run(what, "--systemd=always", "--privileged", "--network", "host", "--hostname", name,
           "-v", "/run/taskbox:/run/taskbox", "-v", f"{run.dir}:{run.dir}:ro",
           # the recipes where the unit sees them (PrivateTmp= hides /tmp)
           "-v", f"{run.dir}/recipes:{RECIPES}:ro", image, "/sbin/init")
    t0 = time.monotonic()
    # until systemd's bus is up, systemctl cannot even ask
    r = ex(name, "for i in $(seq 300); do s=$(timeout 90 systemctl is-system-running --wait "
               "2>/dev/null) && break; [ -n \"$s\" ] && break; sleep 0.1; done; echo $s", timeout=150)
    state = r.stdout.strip()
    if not check(state in ("running", "degraded"), f"{what}: systemd booted ({state})",
                 f"{r.stderr}{cs.logs(name)}"):
        raise RuntimeError("no systemd")
    if state == "degraded":
        pm.log(ex(name, "systemctl --failed --no-legend").stdout)
    pm.log(f"{what}: booted in {time.monotonic() - t0:.1f} s")
    return name


def edit(c, run, port):
    """The edits deploy/README.md lists: worker.json's kafka.brokers,
    ledger.url, store.url, store.endpoint and metrics_listen; worker.env's
    S3 keys (and this run's own topics, group and prefix)."""
    r = ex(c, "cat /etc/taskbox/worker.json")
    cfg = json.loads(r.stdout)
    s = run.settings()
    cfg["kafka"]["brokers"] = s["TASKBOX_KAFKA_BROKERS"]
    cfg["ledger"]["url"] = s["TASKBOX_LEDGER_URL"]
    cfg["store"]["url"] = s["TASKBOX_STORE_URL"]
    cfg["store"]["endpoint"] = s["TASKBOX_STORE_ENDPOINT"]
    cfg["metrics_listen"] = f"127.0.0.1:{port}"
    lines = [f"AWS_ACCESS_KEY_ID={run.env['AWS_ACCESS_KEY_ID']}",
             f"AWS_SECRET_ACCESS_KEY={run.env['AWS_SECRET_ACCESS_KEY']}",
             "# the test's own topics, group and ledger prefix"]
    lines += [f"{k}={s[k]}" for k in ("TASKBOX_KAFKA_GROUP", "TASKBOX_KAFKA_TASKS_TOPIC",
                                      "TASKBOX_KAFKA_EVENTS_TOPIC", "TASKBOX_KAFKA_DLQ_TOPIC",
                                      "TASKBOX_LEDGER_PREFIX")]
    for path, text in (("/etc/taskbox/worker.json", json.dumps(cfg, indent=2)),
                       ("/etc/taskbox/worker.env", "\n".join(lines))):
        r = pm.podman("exec", "-i", c, "sh", "-c", f"cat > {path}", input=text + "\n", check=False)
        check(r.returncode == 0, f"edited {path}", r.stderr)
    mode = ex(c, "stat -c %a /etc/taskbox/worker.env").stdout.strip()
    check(mode == "600", f"worker.env is still mode 600 ({mode})")


def ready(c, port, what):
    url = f"http://127.0.0.1:{port}/readyz"
    try:
        _, took = pm.wait_for(f"{what} ready", lambda: pm.http_get(url, 1)[0] == 200, 90, 0.05)
        check(True, f"{what}: /readyz 200 {took:.2f} s after systemctl returned")
        return True
    except TimeoutError:
        check(False, f"{what}: ready", f"/readyz {pm.http_get(url)}\n"
              + ex(c, "journalctl -u taskbox-worker --no-pager | tail -30").stdout)
        return False


def hello(run, tag):
    rc, ev, out = run.submit(f"{tag}-hello", run.hello)
    if not check(rc == 0, f"{tag}: a task submitted from the host is done"):
        report("submit", rc, out)
    text = run.artifact(f"{tag}-hello", "hello.txt") or ""
    check("hello, queue!" in text, f"{tag}: its output says hello", repr(text))


def drain(c, run, tag):
    """A slow task running when `systemctl stop` comes: the stop waits for
    it, it succeeds in its first attempt, the worker exits 0."""
    def stop():
        r = ex(c, "systemctl stop taskbox-worker", timeout=200)
        return r.returncode == 0, r.stderr
    if not drain_check(run, run.slow, f"{tag}-slow", tag, "systemctl stop", stop):
        return
    show = ex(c, "systemctl show -p ActiveState -p ExecMainStatus taskbox-worker").stdout.split()
    check("ActiveState=inactive" in show and "ExecMainStatus=0" in show,
          f"{tag}: the worker drained and exited 0 ({' '.join(show)})",
          ex(c, "journalctl -u taskbox-worker --no-pager | tail -20").stdout)


def deb(cs, run, base, src):
    t0 = time.monotonic()
    bdir = os.path.join(run.dir, "build-deb")
    r = subprocess.run(f"cmake -S {src} -B {bdir} -G Ninja -DCMAKE_BUILD_TYPE=Release "
                       f"-DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF >/dev/null && "
                       f"cmake --build {bdir} --target package -j2 >/dev/null",
                       shell=True, capture_output=True, text=True, timeout=900)
    if not check(r.returncode == 0, f"deb: built as docs/releasing.md says "
                 f"({time.monotonic() - t0:.0f} s)", r.stderr[-2000:]):
        return
    debs = [f for f in os.listdir(bdir) if f.endswith(".deb")]
    c = boot(cs, base, run, "deb")
    t0 = time.monotonic()
    r = ex(c, f"cd {bdir} && apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "
              f"apt-get install -y -q ./{debs[0]}", timeout=600)
    if not check(r.returncode == 0, f"deb: apt-get install ./{debs[0]} "
                 f"({time.monotonic() - t0:.0f} s)", r.stdout[-1500:] + r.stderr[-1500:]):
        return
    port = pm.free_port()
    edit(c, run, port)
    # deploy/README.md's check line, as written
    line = [l for l in readme_section(src, "From the Debian package") if "--check" in l][0]
    r = ex(c, line.split("#")[0])
    check(r.returncode == 0, f"deb: `{line.split('#')[0].strip()}` says it can serve",
          f"exit {r.returncode}: {r.stdout}{r.stderr}")
    r = ex(c, "systemctl enable --now taskbox-worker")
    check(r.returncode == 0, "deb: systemctl enable --now taskbox-worker", r.stderr)
    if ready(c, port, "deb"):
        hello(run, "deb")
        drain(c, run, "deb")


def readme_section(src, first):
    """The sh block that follows the paragraph starting @p first."""
    text = open(os.path.join(src, "deploy/README.md")).read()
    m = re.search(r"^" + re.escape(first) + r".*?```sh\n(.*?)```", text, re.S | re.M)
    return [l for l in m.group(1).splitlines() if l.strip()]


def from_build(cs, run, base, src):
    c = boot(cs, base, run, "build")
    t0 = time.monotonic()
    files = pm.sh(f"git -C {src} ls-files -co --exclude-standard").split("\n")
    listing = os.path.join(run.dir, "files")
    with open(listing, "w") as f:
        f.write("\n".join(x for x in files if x and os.path.exists(os.path.join(src, x))))
    r = subprocess.run(f"tar -C {src} -cf - -T {listing} | podman --runtime runc exec -i {c} "
                       "sh -c 'mkdir -p /root/taskbox && tar -xf - -C /root/taskbox'",
                       shell=True, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "build: the sources copied in", r.stderr)
    lines = readme_section(src, "From a build")
    at = next(i for i, l in enumerate(lines) if "--check" in l)
    port = pm.free_port()
    env = ["CMAKE_BUILD_PARALLEL_LEVEL=2"]
    r = ex(c, "set -ex; cd /root/taskbox\n" + "\n".join(lines[:at]), timeout=1200, env=env)
    if not check(r.returncode == 0, f"build: deploy/README.md's \"From a build\" up to its "
                 f"--check line ({time.monotonic() - t0:.0f} s)",
                 f"exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-3000:]}"):
        return
    edit(c, run, port)
    r = ex(c, "set -ex; cd /root/taskbox\n" + "\n".join(lines[at:]), timeout=300, env=env)
    if not check(r.returncode == 0, "build: the rest of the block (--check, enable --now)",
                 f"exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"):
        return
    if ready(c, port, "build"):
        hello(run, "build")
        t0 = time.monotonic()
        r = ex(c, "systemctl stop taskbox-worker && systemctl show -p ExecMainStatus taskbox-worker")
        check(r.returncode == 0 and "ExecMainStatus=0" in r.stdout,
              f"build: stopped in {time.monotonic() - t0:.1f} s, exit 0", r.stdout + r.stderr)


def stop_all(cs):
    """Each container's worker stopped (it leaves the group at once), then
    the container removed."""
    for n in list(cs.names):
        ex(n, "systemctl stop taskbox-worker", timeout=200)
        cs.remove(n)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    src, taskbox = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    pm.require()
    svc = pm.services()
    t_all = time.monotonic()
    t0 = time.monotonic()
    base = pm.base_image("systemd", SYSTEMD)
    build_base = pm.base_image("systemd-build", SYSTEMD + build_packages(src))
    pm.log(f"bases ready in {time.monotonic() - t0:.0f} s")
    run = Run(src, taskbox, svc, "sysd")
    run.hello = (f"file://{RECIPES}/hello", run.recipe("hello", copy="hello")[1])
    run.slow = (f"file://{RECIPES}/slow", slow_recipe(run)[1])
    with pm.Containers("sysd") as cs:
        try:
            t0 = time.monotonic()
            deb(cs, run, base, src)
            pm.log(f"figure: the .deb under systemd, {time.monotonic() - t0:.0f} s")
            stop_all(cs)
            t0 = time.monotonic()
            from_build(cs, run, build_base, src)
            pm.log(f"figure: from a build under systemd, {time.monotonic() - t0:.0f} s")
        except Exception as e:  # noqa: BLE001: reported, then the containers go
            check(False, "the run", f"{type(e).__name__}: {e}")
            for n in cs.names:
                pm.log(f"--- {n}\n" + ex(n, "journalctl --no-pager | tail -40").stdout)
        finally:
            stop_all(cs)
            run.close()
    pm.log(f"\n{len(pm.failures)} failed; {time.monotonic() - t_all:.0f} s in all")
    return 1 if pm.failures else 0


if __name__ == "__main__":
    sys.exit(main())
