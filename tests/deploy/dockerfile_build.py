#!/usr/bin/env python3
"""The worker image's Dockerfile, carried out without a container engine
(container_worker.py builds it with podman; this test needs none): every
stage's instructions, as written, in a scratch root of its own, and the
image that results checked.

Each stage's root is an overlay whose lower layer is this machine's own
root and whose upper layer is a tmpfs, in a private mount namespace with
no network. So:
  - the base is this machine's Debian 12, not the pinned
    debian:bookworm-slim (no registry is reachable here to pull it): a
    superset of its packages, so a package the Dockerfile forgets to
    install is not caught here (check_deploy.py's check of the runtime
    libraries against the packages installed covers that);
  - RUN steps run as written, with Docker's environment (PATH, HOME, the
    stage's ARGs and ENVs); apt's archive is this machine's installed
    packages (the scratch root has no apt sources and no lists), so
    `apt-get update` fetches nothing and `apt-get install` of a package
    this machine lacks fails, naming it;
  - COPY takes files from the repository (the build context), honouring
    Dockerfile.dockerignore (a copied path it excludes fails as it would
    under BuildKit), or from an earlier stage's root (--from);
  - an instruction this script does not know fails it, so that the
    Dockerfile cannot outgrow the test unnoticed.
Then the final stage's root is run as the image would be: its
ENTRYPOINT's `--version` names the version and the revision given as
build argument, its configuration and runtimes validate, its labels say
the version and revision, and every library the programs need resolves.

Usage: dockerfile_build.py SOURCE_DIR. As root; skips (77) elsewhere than
Debian 12 or without unshare(1).
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dockerfile import dockerignore_excludes, ignore_patterns, instructions, stages  # noqa: E402

DOCKERFILE = "deploy/container/Dockerfile"
IGNORE = "deploy/container/Dockerfile.dockerignore"
# Docker's environment for RUN in a Debian image
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root", "HOSTNAME": "taskbox-build"}


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, cond, what, why=""):
        if cond:
            self.passed += 1
            print(f"ok    {what}")
        else:
            self.failed += 1
            print(f"FAIL  {what}" + (f": {why}" if why else ""))
        return cond


C = Checks()


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, **kw)


def substitute(text, env):
    """${VAR} and $VAR from @p env, as Docker expands them in LABEL and
    COPY (RUN leaves it to the shell)."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), text)


def copy_into(src, root, dst, dst_is_dir):
    """COPY's rule: a directory's contents go into dst; a file goes to dst,
    or into it when dst names a directory."""
    target = os.path.join(root, dst.lstrip("/"))
    if os.path.isdir(src):
        shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
        return
    if dst_is_dir:
        os.makedirs(target, exist_ok=True)
        target = os.path.join(target, os.path.basename(src))
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy2(src, target)


class Stage:
    def __init__(self, name, work):
        self.name, self.dir = name, os.path.join(work, name)
        self.root = os.path.join(self.dir, "root")
        for d in ("upper", "work", "root"):
            os.makedirs(os.path.join(self.dir, d))
        sh("mount", "-t", "overlay", "overlay", "-o",
           f"lowerdir=/,upperdir={self.dir}/upper,workdir={self.dir}/work", self.root)
        sh("mount", "-t", "proc", "proc", os.path.join(self.root, "proc"))
        sh("mount", "--rbind", "/dev", os.path.join(self.root, "dev"))
        self.env, self.workdir, self.meta = dict(BASE_ENV), "/", {"labels": {}}
        # apt's archive is what this machine has installed: no sources, no
        # lists (removed in the upper layer only), so `apt-get update`
        # fetches nothing and `apt-get install` finds only installed
        # packages, at their installed versions
        for d in ("etc/apt/sources.list.d", "var/lib/apt/lists"):
            for f in os.listdir(os.path.join(self.root, d)):
                p = os.path.join(self.root, d, f)
                if os.path.isfile(p) or os.path.islink(p):
                    os.unlink(p)
        if os.path.exists(os.path.join(self.root, "etc/apt/sources.list")):
            os.unlink(os.path.join(self.root, "etc/apt/sources.list"))

    def run(self, cmd, env=None):
        return subprocess.run(["chroot", self.root, "/bin/sh", "-c", f"cd {shlex.quote(self.workdir)} && {cmd}"],
                              env=env or self.env, capture_output=True, text=True)


def do_copy(stage, args, src_root, done, ignore):
    words = shlex.split(substitute(args, stage.env))
    flags = [w for w in words if w.startswith("--")]
    rest = [w for w in words if not w.startswith("--")]
    srcs, dst = rest[:-1], rest[-1]
    frm = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
    other = [f for f in flags if not f.startswith("--from=")]
    if not C.check(not other, f"{stage.name}: COPY {args}: flags understood", f"not emulated: {other}"):
        return False
    if frm:
        if not C.check(frm[0] in done, f"{stage.name}: COPY --from={frm[0]} names a finished stage"):
            return False
        base = done[frm[0]].root
    else:
        base = src_root
    for s in srcs:
        rel = s.strip("/")
        if not frm and not C.check(not dockerignore_excludes(ignore, rel),
                                   f"{stage.name}: COPY source {rel} is in the context",
                                   f"{IGNORE} excludes it"):
            return False
        path = os.path.join(base, rel)
        if not C.check(os.path.exists(path), f"{stage.name}: COPY source {s} exists"):
            return False
        copy_into(path, stage.root, dst, dst.endswith("/") or len(srcs) > 1)
    return True


def do_run(stage, args):
    r = stage.run(args)
    ok = C.check(r.returncode == 0, f"{stage.name}: RUN {args[:70]}{'...' if len(args) > 70 else ''}",
                 f"exit {r.returncode}")
    if not ok:
        print("\n".join((r.stdout + r.stderr).splitlines()[-30:]))
    return ok


def do_stage(name, image, ins, ctx):
    """Carries out one stage. @return the Stage, or None when a step failed."""
    if not C.check(image.startswith("debian:bookworm") or image.startswith("debian:12"),
                   f"{name}: FROM {image} is Debian 12, which this machine's root stands in for"):
        return None
    stage = Stage(name, ctx["work"])
    for i, a in ins:
        if i == "ARG":
            k, _, v = a.partition("=")
            stage.env[k] = ctx["build_args"].get(k, v)
        elif i == "ENV":
            k, _, v = a.partition("=")
            stage.env[k] = substitute(v, stage.env)
        elif i == "WORKDIR":
            stage.workdir = substitute(a, stage.env)
            os.makedirs(os.path.join(stage.root, stage.workdir.lstrip("/")), exist_ok=True)
        elif i == "COPY":
            if not do_copy(stage, a, ctx["src"], ctx["done"], ctx["ignore"]):
                return None
        elif i == "RUN":
            if not do_run(stage, a):
                return None
        elif i == "LABEL":
            for w in shlex.split(substitute(a, stage.env)):
                k, _, v = w.partition("=")
                stage.meta["labels"][k] = v
        elif i in ("ENTRYPOINT", "CMD"):
            stage.meta[i] = json.loads(a)
        elif i in ("EXPOSE", "STOPSIGNAL", "USER"):
            stage.meta[i] = a
        else:
            C.check(False, f"{name}: {i} {a}", "an instruction dockerfile_build.py does not carry out")
            return None
    return stage


def check_image(stage, version, revision):
    """The final stage's root, used as the image would be."""
    env = {k: v for k, v in stage.env.items() if not k.startswith("TASKBOX_")}
    entry = stage.meta.get("ENTRYPOINT", [])
    cmd = stage.meta.get("CMD", [])
    r = stage.run(" ".join(shlex.quote(w) for w in entry[:1] + ["--version"]), env)
    first = (r.stdout.splitlines() or [""])[0]
    C.check(r.returncode == 0 and first.startswith(f"taskbox {version} (commit {revision},"),
            f"the image's `{entry[0] if entry else '?'} --version`: {first}",
            f"exit {r.returncode}, wanted taskbox {version} (commit {revision}, ...) {r.stderr[-300:]}")
    C.check("Release build" in first, "the image's taskbox is a Release build", first)
    conf = cmd[cmd.index("--config") + 1] if "--config" in cmd else None
    if C.check(conf is not None, f"CMD names a configuration ({cmd})"):
        r = stage.run(f"taskbox schema config {shlex.quote(conf)}", env)
        C.check(r.returncode == 0, f"the image's {conf} validates", (r.stdout + r.stderr).strip())
        cfg = json.load(open(os.path.join(stage.root, conf.lstrip("/"))))
        rdir = cfg.get("runtimes_dir", "/etc/taskbox/runtimes")
        names = sorted(os.listdir(os.path.join(stage.root, rdir.lstrip("/"))))
        C.check(names, f"the image has runtimes in {rdir} ({names})")
        for n in names:
            r = stage.run(f"taskbox schema runtime {shlex.quote(rdir + '/' + n)}", env)
            C.check(r.returncode == 0, f"the image's runtime {n} validates", (r.stdout + r.stderr).strip())
    for prog in ("/usr/local/bin/taskbox", "/usr/local/libexec/taskbox/taskbox-sandbox-init"):
        r = stage.run(f"ldd {prog}", env)
        static = "not a dynamic executable" in r.stdout + r.stderr  # the init is static
        C.check(static or (r.returncode == 0 and "not found" not in r.stdout),
                f"every library {prog} needs resolves in the image{' (static)' if static else ''}",
                r.stdout + r.stderr)
    labels = stage.meta["labels"]
    C.check(labels.get("org.opencontainers.image.version") == version,
            f"label org.opencontainers.image.version is {version}", str(labels))
    C.check(labels.get("org.opencontainers.image.revision") == revision,
            f"label org.opencontainers.image.revision is the build argument {revision}", str(labels))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    src = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        print("skipped: mounts and chroot need root")
        return 77
    if not shutil.which("unshare") or not shutil.which("chroot"):
        print("skipped: no unshare(1) or chroot(8)")
        return 77
    if not open("/etc/debian_version").read().startswith("12"):
        print("skipped: this machine's root stands in for Debian 12, and it is not that")
        return 77
    if os.environ.get("TB_DOCKERFILE_NS") != "1":
        # a private mount namespace (nothing of it reaches the host's
        # mounts; all goes when it ends) with no network
        os.environ["TB_DOCKERFILE_NS"] = "1"
        return subprocess.run(["unshare", "-m", "-n", "--propagation", "private",
                               sys.executable] + sys.argv).returncode
    version = re.search(r"project\(taskbox VERSION ([0-9.]+)",
                        open(os.path.join(src, "CMakeLists.txt")).read()).group(1)
    r = subprocess.run(["git", "-C", src, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    revision = r.stdout.strip() if r.returncode == 0 else "0123456789ab"
    work = tempfile.mkdtemp(prefix="tb-dockerfile-")
    try:
        sh("mount", "-t", "tmpfs", "-o", "mode=0700", "tb-dockerfile", work)
        text = open(os.path.join(src, DOCKERFILE)).read()
        all_stages, before = stages(instructions(text))
        # the ARGs before the first FROM, by their defaults (the pinned
        # base, which this machine's root stands in for)
        global_args = {}
        for i, a in before:
            if i == "ARG":
                k, _, v = a.partition("=")
                global_args[k] = v
        all_stages = [(n, substitute(image, global_args), ins) for n, image, ins in all_stages]
        ctx = {"work": work, "src": src, "done": {},
               "build_args": {"TASKBOX_REVISION": revision},
               "ignore": ignore_patterns(open(os.path.join(src, IGNORE)).read())}
        print(f"carrying out {DOCKERFILE} ({len(all_stages)} stages), revision {revision}")
        final = None
        for name, image, ins in all_stages:
            name = name or f"stage{len(ctx['done'])}"
            final = do_stage(name, image, ins, ctx)
            if final is None:
                break
            ctx["done"][name] = final
        if final is not None:
            check_image(final, version, revision)
    finally:
        subprocess.run(["umount", "-R", work], capture_output=True)
        os.rmdir(work)
    print(f"\n{C.passed} checks passed, {C.failed} failed")
    return 1 if C.failed else 0


if __name__ == "__main__":
    sys.exit(main())
