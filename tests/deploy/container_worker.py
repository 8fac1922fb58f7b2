#!/usr/bin/env python3
"""The worker image, built and run by a real engine (Debian 12's podman,
as root): deploy/container/Dockerfile built from a Debian 12 base made
from the archive (tests/deploy/podman.py), then run the way
deploy/k8s/deployment.yaml runs it, against the test services:

  deployment.yaml                     here
  privileged: true                    --privileged
  hostUsers: true                     --userns=host
  readOnlyRootFilesystem: true        --read-only (and no tmpfs podman
                                      would add: --read-only-tmpfs=false)
  runAsUser: 0                        the image's USER root
  volumes config, runtimes (r/o),     directories of the test, mounted
    work, cache, tmp (emptyDir),        where the manifest mounts them;
    id-ranges (hostPath /run/taskbox)   the host's /run/taskbox itself
  configmap.yaml's worker.json and    the same files, the services named
    default.json                        by TASKBOX_* variables, as the
                                        Secret's keys are
  TASKBOX_WORKER_ID = the pod's name  the container's name
  limits.memory 3Gi                   --memory 3g
  terminationGracePeriodSeconds 150   --stop-timeout 150
  the pod's network                   --network host: the services are
                                        on the host's loopback
  (nothing)                           /dev/fuse: privileged gives every
                                        host device, lazy inputs need it

In it, with the host's cgroup namespace (podman's default on a cgroup v1
host, as on many v1 nodes), three tasks submitted from the host succeed:
one on the runtime's host binds (the image's /usr), one in an OCI image
pulled from the registry on loopback, one whose input is read on demand
(a FUSE mount in the sandbox, `lazy` in the result's usage). Then the
same container with a private cgroup namespace takes a task. Each
container stops gracefully (SIGTERM, exit 0), the first with a task
running, which finishes in its attempt while the stop waits (the drain
the grace period is for). Figures: the image's size
and its build time, and start to ready (/readyz answers 200).

Usage: container_worker.py SOURCE_DIR TASKBOX (the host's, to submit).
Skips (77) without root, podman, runc, mmdebstrap, FUSE or user
namespaces (podman.require), or without the services' addresses.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import podman as pm  # noqa: E402
from taskrun import Run, drain_check, report, result_of, slow_recipe  # noqa: E402

check = pm.check


def manifests(src):
    """deploy/k8s/configmap.yaml's worker.json and runtimes."""
    import yaml
    cfg, runtimes = None, {}
    with open(os.path.join(src, "deploy/k8s/configmap.yaml")) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc.get("kind") == "ConfigMap":
                if doc["metadata"]["name"] == "taskbox-worker-config":
                    cfg = doc["data"]["worker.json"]
                elif doc["metadata"]["name"] == "taskbox-runtimes":
                    runtimes = dict(doc["data"])
    return cfg, runtimes


def env_image(run, registry):
    """A one-layer OCI image (busybox and a marker file), pushed to the
    registry on loopback; @return its reference, pinned by digest."""
    d = os.path.join(run.dir, "image")
    os.mkdir(d)
    pm.sh(f"set -e; cd {d}; umoci init --layout layout; umoci new --image layout:t; "
          "umoci unpack --rootless --image layout:t b >/dev/null; "
          "mkdir -p b/rootfs/bin b/rootfs/etc; cp /bin/busybox b/rootfs/bin/; "
          "ln -s busybox b/rootfs/bin/sh; "
          f"echo 'inside {run.name}' > b/rootfs/etc/tb-image; "
          "umoci repack --image layout:t b; rm -rf b; "
          f"skopeo copy -q --dest-tls-verify=false --digestfile digest oci:layout:t "
          f"docker://{registry}/{run.name}/env:t")
    with open(os.path.join(d, "digest")) as f:
        return f"{registry}/{run.name}/env@{f.read().strip()}"


LAZY_AGENT = """#!/bin/sh
# reads one 1 MiB block from the middle of its input, which must be a
# FUSE mount (read on demand), and writes the block's SHA-256
read -r prompt
grep -q ' /inputs[/ ].* - fuse' /proc/self/mountinfo || {
  echo 'no FUSE mount at /inputs' >&2; exit 1; }
dd if=/inputs/big bs=1M skip=5 count=1 2>/dev/null | sha256sum | cut -d' ' -f1 > /outputs/block.sha
printf '{"type":"message","role":"assistant","text":"read a block"}\\n' >&3
"""

IMAGE_AGENT = """#!/bin/sh
# in the image: only busybox's sh; its marker file to the outputs
read -r prompt
[ -f /etc/tb-image ] || { echo 'not in the image' >&2; exit 1; }
read -r marker < /etc/tb-image
echo "$marker" > /outputs/env.txt
printf '{"type":"message","role":"assistant","text":"in the image"}\\n' >&3
"""


def recipes(run, image_ref):
    run.slow = slow_recipe(run)
    hello = run.recipe("hello", copy="hello")
    image = run.recipe("in-image", {
        "taskbox.json": json.dumps({"v": 1, "name": "in-image",
                                    "agent": {"command": ["/bin/sh", "/recipe/agent.sh"]},
                                    "environment": {"image": image_ref}}),
        "agent.sh": IMAGE_AGENT})
    lazy = run.recipe("lazy", {
        "taskbox.json": json.dumps({"v": 1, "name": "lazy",
                                    "agent": {"command": ["/bin/sh", "agent.sh"]}}),
        "agent.sh": LAZY_AGENT})
    return hello, image, lazy


def layout(run, src, registry):
    """The volumes deployment.yaml mounts, as directories of the test."""
    cfg, runtimes = manifests(src)
    vols = {}
    for v in ("config", "runtimes", "work", "cache", "tmp"):
        vols[v] = os.path.join(run.dir, v)
        os.mkdir(vols[v])
    with open(os.path.join(vols["config"], "worker.json"), "w") as f:
        f.write(cfg)
    for n, text in runtimes.items():
        with open(os.path.join(vols["runtimes"], n), "w") as f:
            f.write(text)
    # a runtime of the test's own: images from its repository on the
    # loopback registry, inputs of 1 MiB or more read on demand
    rt = json.loads(runtimes["default.json"])
    rt["name"] = "test"
    rt["sandbox"]["images"] = {"allow": [f"{registry}/{run.name}"]}
    rt["sandbox"]["lazy_inputs_mb"] = 1
    with open(os.path.join(vols["runtimes"], "test.json"), "w") as f:
        json.dump(rt, f)
    os.makedirs("/run/taskbox", exist_ok=True)
    return vols


def start(cs, image, run, vols, port, what, extra=()):
    """A worker container as deployment.yaml describes it; @return (name,
    seconds from `podman run` to /readyz 200)."""
    env = dict(run.settings(), TASKBOX_METRICS_LISTEN=f"127.0.0.1:{port}",
               AWS_ACCESS_KEY_ID=run.env["AWS_ACCESS_KEY_ID"],
               AWS_SECRET_ACCESS_KEY=run.env["AWS_SECRET_ACCESS_KEY"])
    name = f"{cs.prefix}-{what}"
    env["TASKBOX_WORKER_ID"] = name
    args = ["--privileged", "--userns=host", "--read-only", "--read-only-tmpfs=false",
            "--network", "host", "--memory", "3g", "--stop-timeout", "150",
            "-v", f"{vols['config']}:/etc/taskbox/config:ro",
            "-v", f"{vols['runtimes']}:/etc/taskbox/runtimes:ro",
            "-v", f"{vols['work']}:/var/lib/taskbox/work",
            "-v", f"{vols['cache']}:/var/cache/taskbox",
            "-v", f"{vols['tmp']}:/tmp",
            "-v", "/run/taskbox:/run/taskbox",
            # the recipes' repositories (file:// URLs) where the host has them
            "-v", f"{run.dir}/recipes:{run.dir}/recipes:ro"]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    t0 = time.monotonic()
    cs.run(what, *args, *extra, image, "--config", "/etc/taskbox/config/worker.json")
    started = time.monotonic() - t0
    url = f"http://127.0.0.1:{port}/readyz"
    try:
        pm.wait_for(f"{name} ready", lambda: pm.http_get(url, 1)[0] == 200, 180, 0.02)
    except TimeoutError:
        pm.log(f"{name}: /readyz {pm.http_get(url)}\n{cs.logs(name)}")
        raise
    took = time.monotonic() - t0
    pm.log(f"{name}: `podman run -d` returned in {started:.2f} s, /readyz 200 at {took:.2f} s")
    return name, took


def stop(cs, name, run=None, slow=None):
    """SIGTERM, as Kubernetes stops a pod (the manifest's grace period): the
    worker drains and exits 0; with @p slow, a slow task is running then,
    and it finishes in its first attempt while the stop waits."""
    def sigterm():
        r = pm.podman("stop", "-t", "150", name, timeout=200, check=False)
        return r.returncode == 0, r.stderr
    t0 = time.monotonic()
    if slow:
        drain_check(run, slow, f"{name}-slow", name, "podman stop", sigterm)
    else:
        sigterm()
    code = pm.podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
    check(code == "0", f"{name} stopped by SIGTERM in {time.monotonic() - t0:.1f} s, exit 0",
          f"exit {code}\n{cs.logs(name, 20)}")
    cs.remove(name)


def task_checks(run, hello, image, lazy, big, tag):
    rc, ev, out = run.submit(f"{tag}-hello", hello)
    if not check(rc == 0, f"{tag}: a task on the host binds succeeded"):
        report("submit", rc, out)
    text = run.artifact(f"{tag}-hello", "hello.txt") or ""
    check("hello, queue!" in text, f"{tag}: its output says hello", repr(text))
    if not image:
        return
    rc, ev, out = run.submit(f"{tag}-image", image, "--runtime", "test")
    if not check(rc == 0, f"{tag}: a task in an image from the registry succeeded"):
        report("submit", rc, out)
    prepared = [e for e in ev if e.get("type") == "phase"
                and e.get("payload", {}).get("phase") == "prepared"]
    envs = [e["payload"].get("environment") for e in prepared if e["payload"].get("environment")]
    check(envs and envs[0].get("digest"), f"{tag}: it was prepared in the image ({envs})")
    text = run.artifact(f"{tag}-image", "env.txt") or ""
    check(text.strip() == f"inside {run.name}", f"{tag}: the agent ran in the image", repr(text))
    rc, ev, out = run.submit(f"{tag}-lazy", lazy, "--runtime", "test", "--input", f"big=@{big}")
    if not check(rc == 0, f"{tag}: a task with an input read on demand succeeded"):
        report("submit", rc, out)
    inputs = result_of(ev).get("usage", {}).get("inputs", [])
    check(inputs and inputs[0].get("lazy") is True, f"{tag}: its input was read on demand ({inputs})")
    with open(big, "rb") as f:
        f.seek(5 << 20)
        want = hashlib.sha256(f.read(1 << 20)).hexdigest()
    text = (run.artifact(f"{tag}-lazy", "block.sha") or "").strip()
    check(text == want, f"{tag}: the block it read is the input's", f"{text} != {want}")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    src, taskbox = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    pm.require()
    svc = pm.services()
    registry = svc.get("TASKBOX_TEST_REGISTRY") or pm.skip("no TASKBOX_TEST_REGISTRY")
    for t in ("umoci", "skopeo", "curl", "git"):
        if not shutil.which(t):
            pm.skip(f"no {t} (deploy/local/install-deps test)")
    if not os.path.exists("/bin/busybox"):
        pm.skip("no /bin/busybox (busybox-static)")
    t_all = time.monotonic()
    image, took = pm.worker_image(src)
    size = int(pm.podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    base = int(pm.podman("image", "inspect", "--format", "{{.Size}}", pm.worker_base()).stdout)
    pm.log(f"figure: image size {size / 1e6:.0f} MB (base {base / 1e6:.0f} MB), build {took:.0f} s")
    check(size < 400e6, f"the image is {size / 1e6:.0f} MB, under 400 MB")
    r = pm.podman("run", "--rm", *pm.limits(), image, "--version")
    check(r.stdout.startswith("taskbox ") and "Release build" in r.stdout,
          f"the image's taskbox --version: {r.stdout.splitlines()[0] if r.stdout else r.stderr}")
    run = Run(src, taskbox, svc, "cont")
    with pm.Containers("cont") as cs:
        try:
            vols = layout(run, src, registry)
            hello, image_recipe, lazy = recipes(run, env_image(run, registry))
            big = os.path.join(run.dir, "big.bin")
            with open(big, "wb") as f:
                f.write(os.urandom(8 << 20))
            port = pm.free_port()
            name, ready = start(cs, image, run, vols, port, "host")
            pm.log(f"figure: container start to ready {ready:.2f} s (host cgroup namespace)")
            r = pm.podman("exec", name, "test", "-c", "/dev/fuse", check=False)
            check(r.returncode == 0, "/dev/fuse in the container")
            task_checks(run, hello, image_recipe, lazy, big, "host")
            stop(cs, name, run, run.slow)
            name, ready = start(cs, image, run, vols, port, "private", ["--cgroupns=private"])
            pm.log(f"figure: container start to ready {ready:.2f} s (private cgroup namespace)")
            task_checks(run, hello, None, None, big, "private")
            stop(cs, name)
        except Exception as e:  # noqa: BLE001: reported, then the containers go
            check(False, "the run", f"{type(e).__name__}: {e}")
            for n in cs.names:
                pm.log(f"--- {n}\n{cs.logs(n)}")
        finally:
            cs.close()
            subprocess.run(["rm", "-rf", run.dir])
    pm.log(f"\n{len(pm.failures)} failed; {time.monotonic() - t_all:.0f} s in all")
    return 1 if pm.failures else 0


if __name__ == "__main__":
    sys.exit(main())
