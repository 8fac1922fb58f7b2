#!/usr/bin/env python3
"""Checks deploy/: every file parses, and the files agree with each other
and with the code (names, ports, labels, timeouts, metric names).

    check_deploy.py TASKBOX_BINARY SOURCE_DIR

Each check prints one line: "ok" and what was checked, or "FAIL", the file
and what disagrees. Exit 0 when every check passed, 1 when one failed, 77
(ctest's skip) when PyYAML is missing. Needs the standard library, PyYAML
(Debian's python3-yaml) and the built taskbox binary, which validates the
configuration files (`taskbox schema config|runtime FILE`).

Read from the code rather than written here: the topic and group names
(common/src/config.c's default JSON), the drain timeout (drain_seconds there),
the metric names (common/src/metrics.c's string literals; the contract below
when that file does not exist yet), the partition counts the test services
create (deploy/local/services), the project version (CMakeLists.txt).
"""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dockerfile import dockerignore_excludes, ignore_patterns  # noqa: E402
from dockerfile import instructions as dockerfile_instructions  # noqa: E402

try:
    import yaml
except ImportError:
    # Debian's python3-yaml is installed for /usr/bin/python3; a python3
    # from pyenv or a virtualenv first on PATH does not see it.
    if os.path.exists("/usr/bin/python3") and os.environ.get("TB_DEPLOY_REEXEC") != "1":
        os.environ["TB_DEPLOY_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("SKIP: PyYAML is missing (deploy/local/install-deps test installs python3-yaml)")
    sys.exit(77)

# The metrics contract (issue 9), used when common/src/metrics.c does not exist
# yet; label names and the values the dashboards may select on.
CONTRACT = {
    "taskbox_worker_info": ("gauge", {"worker"}),
    "taskbox_build_info": ("gauge", {"version", "commit", "build_type"}),
    "taskbox_up": ("gauge", {"dependency"}),
    "taskbox_slots": ("gauge", set()),
    "taskbox_slots_busy": ("gauge", set()),
    "taskbox_tasks_waiting": ("gauge", set()),
    "taskbox_tasks_total": ("counter", {"outcome"}),
    "taskbox_attempt_failures_total": ("counter", {"code"}),
    "taskbox_phase_duration_seconds": ("histogram", {"phase"}),
    "taskbox_sandbox_launch_seconds": ("histogram", set()),
    "taskbox_step_duration_seconds": ("histogram", {"step"}),
    "taskbox_consumer_lag": ("gauge", {"partition"}),
    "taskbox_egress_requests_total": ("counter", {"status"}),
    "taskbox_dlq_messages_total": ("counter", {"cause"}),
    "taskbox_events_total": ("counter", set()),
    "taskbox_image_gets_total": ("counter", {"result"}),
    "taskbox_image_fetched_bytes_total": ("counter", set()),
    "taskbox_image_evictions_total": ("counter", set()),
    "taskbox_image_lazy_starts_total": ("counter", {"result"}),
    "taskbox_image_read_orders_total": ("counter", {"result"}),
    "taskbox_image_prefetched_bytes_total": ("counter", set()),
    "taskbox_attempts_accounted_total": ("counter", {"runtime", "recipe"}),
    "taskbox_attempt_wall_seconds_total": ("counter", {"runtime", "recipe"}),
    "taskbox_attempt_cpu_seconds_total": ("counter", {"runtime", "recipe", "part"}),
    "taskbox_attempt_egress_requests_total": ("counter", {"runtime", "recipe", "result"}),
    "taskbox_attempt_egress_bytes_total": ("counter", {"runtime", "recipe", "direction"}),
    "taskbox_attempt_saved_bytes_total": ("counter", {"runtime", "recipe"}),
    "taskbox_attempt_tokens_total": ("counter", {"runtime", "recipe", "kind"}),
}
LABEL_VALUES = {
    "outcome": {"succeeded", "failed", "timed-out", "oom-killed", "pids-limit", "cancelled",
                "error", "budget", "dead-lettered"},
    "phase": {"received", "validated", "claimed", "prepared", "running", "settled", "collected",
              "judged", "recorded", "torn-down", "acknowledged"},
    "status": {"2xx", "3xx", "4xx", "5xx", "refused"},
    "step": {"ledger_begin", "recipe", "egress_start", "store_record", "store_manifest",
             "events_delivered", "done_marker", "teardown", "teardown_wait"},
    "result": {"cached", "made", "refused", "failed", "sent"},  # image gets; egress requests
}
# Series Prometheus makes itself for every target, and labels its service
# discovery attaches; not exported by the worker.
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"instance", "job", "pod", "namespace", "container", "service", "node"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
K8S_LABELS = {
    "app.kubernetes.io/name": "taskbox-worker",
    "app.kubernetes.io/instance": "taskbox",
    "app.kubernetes.io/component": "worker",
    "app.kubernetes.io/part-of": "taskbox",
}
# systemd options that break the sandbox (deploy/systemd/taskbox-worker.service says why).
SYSTEMD_FORBIDDEN = {
    "PrivateUsers": "maps only root: the sandboxes' host id ranges would be unmapped",
    "ProtectKernelTunables": "covers /proc/sys: the sandbox's fresh /proc mount is refused",
    "ProtectKernelLogs": "covers /proc/kmsg: the sandbox's fresh /proc mount is refused",
    "ProtectProc": "remounts /proc: the sandbox's fresh /proc mount is refused",
    "ProcSubset": "remounts /proc: the sandbox's fresh /proc mount is refused",
    "ProtectControlGroups": "makes /sys/fs/cgroup read-only: no sandbox limits",
    "ProtectHostname": "denies sethostname, which each sandbox calls in its UTS namespace",
    "RestrictNamespaces": "the sandbox creates namespaces",
}


class Checks:
    def __init__(self):
        self.failed = 0
        self.passed = 0

    def ok(self, what):
        self.passed += 1
        print(f"ok    {what}")

    def fail(self, path, what):
        self.failed += 1
        print(f"FAIL  {path}: {what}")

    def check(self, cond, path, what, why=""):
        """@p what says what was checked; @p why, what disagrees."""
        if cond:
            self.ok(f"{path}: {what}")
        else:
            self.fail(path, f"{what}: {why}" if why else what)
        return cond

    def note(self, what):
        print(f"note  {what}")


C = Checks()
SRC = ""
TASKBOX = ""
PORTS = []  # (where, metrics port): every file must name the same one


def port_seen(where, port):
    PORTS.append((where, port))


def rel(path):
    return os.path.relpath(path, SRC)


def read(path):
    with open(os.path.join(SRC, path), encoding="utf-8") as f:
        return f.read()


def exists(path):
    return os.path.exists(os.path.join(SRC, path))


# --------------------------------------------------------------- the code

def c_string_literal(text, name):
    """The value of `const char NAME[] = "..." "...";` in C source."""
    m = re.search(r"\b%s\s*\[\s*\]\s*=\s*((?:\s*\"(?:[^\"\\]|\\.)*\")+)\s*;" % re.escape(name), text)
    if not m:
        return None
    parts = re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1))
    return bytes("".join(parts), "utf-8").decode("unicode_escape")


def code_defaults():
    path = "common/src/config.c"
    lit = c_string_literal(read(path), "tb_config_defaults")
    if not C.check(lit is not None, path, "tb_config_defaults found"):
        return None
    try:
        d = json.loads(lit)
    except ValueError as e:
        C.fail(path, f"tb_config_defaults is not JSON: {e}")
        return None
    C.ok(f"{path}: defaults read: group {d['kafka']['group']}, topics "
         f"{d['kafka']['tasks_topic']} {d['kafka']['events_topic']} {d['kafka']['dlq_topic']}")
    return d


def drain_seconds(defaults):
    """The drain timeout: the configuration's drain_seconds default (the
    deployed configurations leave it so)."""
    path = "common/src/config.c"
    s = (defaults or {}).get("drain_seconds")
    if not C.check(isinstance(s, int), path, "drain timeout (drain_seconds) in the defaults"):
        return None
    C.ok(f"{path}: drain timeout is {s} s")
    return s


def project_version():
    m = re.search(r"project\(\s*taskbox\s+VERSION\s+([0-9.]+)", read("CMakeLists.txt"))
    return m.group(1) if m else None


def service_topics():
    """{topic: partitions} that deploy/local/services creates."""
    m = re.search(r'^TOPICS="([^"]*)"', read("deploy/local/services"), re.M)
    if not m:
        return {}
    return {t.split(":")[0]: int(t.split(":")[1]) for t in m.group(1).split()}


def metric_names():
    """{name: type} exported by the worker: from the string literals of
    common/src/metrics.c (and health.c, which renders taskbox_up) when it
    exists, else the contract."""
    path = "common/src/metrics.c"
    if not exists(path):
        C.note(f"{path} does not exist yet: metric names from the contract in this script")
        return {n: t for n, (t, _) in CONTRACT.items()}
    text = read(path) + (read("common/src/health.c") if exists("common/src/health.c") else "")
    names = set(re.findall(r"\"(taskbox_[a-z0-9_]+)", text))
    types = {}
    for n in names:
        m = re.search(r"\"%s\"\s*,\s*\"(counter|gauge|histogram|summary)\"" % n, text)
        types[n] = m.group(1) if m else CONTRACT.get(n, ("untyped",))[0]
    C.check(bool(names), path, f"{len(names)} metric names read from its string literals")
    if names != set(CONTRACT):
        C.note(f"{path} and the contract differ: only in metrics.c "
               f"{sorted(names - set(CONTRACT))}, only in the contract {sorted(set(CONTRACT) - names)}")
    return types


# ------------------------------------------------------------------ parsing

def load_all():
    """Parses every YAML and JSON file under deploy/. Returns {relpath: docs}."""
    docs = {}
    files = sorted(glob.glob(os.path.join(SRC, "deploy", "**", "*"), recursive=True))
    for f in files:
        r = rel(f)
        if f.endswith((".yaml", ".yml")):
            try:
                with open(f, encoding="utf-8") as fh:
                    d = [x for x in yaml.safe_load_all(fh) if x is not None]
                C.check(len(d) > 0, r, f"parses as YAML ({len(d)} document{'s' if len(d) != 1 else ''})",
                        "no document")
                docs[r] = d
            except yaml.YAMLError as e:
                C.fail(r, f"does not parse as YAML: {e}")
        elif f.endswith(".json"):
            try:
                with open(f, encoding="utf-8") as fh:
                    docs[r] = [json.load(fh)]
                C.ok(f"{r}: parses as JSON")
            except ValueError as e:
                C.fail(r, f"does not parse as JSON: {e}")
    return docs


def k8s_objects(docs):
    """{(kind, name): (file, object)} for deploy/k8s."""
    out = {}
    for path, ds in docs.items():
        if not path.startswith("deploy/k8s/") or path.endswith("kustomization.yaml"):
            continue
        for d in ds:
            if isinstance(d, dict) and "kind" in d:
                out[(d["kind"], d.get("metadata", {}).get("name"))] = (path, d)
    return out


def find_kind(objs, kind):
    return [(p, o) for (k, _), (p, o) in objs.items() if k == kind]


# ------------------------------------------------------- configuration files

def schema_check(kind, path, text=None):
    """Runs `taskbox schema KIND FILE`; @p text is written to a temporary
    file first (a document embedded in a manifest)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKBOX_")}
    tmp = None
    target = os.path.join(SRC, path)
    if text is not None:
        tmp = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        tmp.write(text)
        tmp.close()
        target = tmp.name
    try:
        r = subprocess.run([TASKBOX, "schema", kind, target], env=env, capture_output=True,
                           text=True, timeout=30)
        out = (r.stdout + r.stderr).strip().replace(target, path)
        C.check(r.returncode == 0, path, f"`taskbox schema {kind}` accepts it",
                f"exit {r.returncode}: {out}")
    finally:
        if tmp:
            os.unlink(tmp.name)


def port_of(listen):
    m = re.match(r"^.*:(\d+)$", listen or "")
    return int(m.group(1)) if m else None


def check_worker_config(path, cfg, defaults, label):
    """A worker.json's names agree with the code's defaults; its metrics
    listen address is reachable from outside the container."""
    if defaults:
        for key in ("group", "tasks_topic", "events_topic", "dlq_topic"):
            want = defaults["kafka"][key]
            got = cfg.get("kafka", {}).get(key, want)
            C.check(got == want, path, f"{label} kafka.{key} is the code's default '{want}'",
                    f"it is '{got}'")
    listen = cfg.get("metrics_listen", "")
    C.check(listen.startswith("0.0.0.0:") or listen.startswith("[::]:"), path,
            f"{label} metrics_listen '{listen}' listens on every address",
            "a probe or Prometheus outside the container could not reach it")
    found = re.findall(r"[\w.]*(?:password|secret)[\w.]*", json.dumps(cfg), re.I)
    C.check(not found, path, f"{label} holds no credentials", f"found {found}")
    port_seen(f"{path} ({label}) metrics_listen", port_of(listen))
    return port_of(listen)


# --------------------------------------------------------------- Dockerfile

def check_dockerfile(defaults):
    path = "deploy/container/Dockerfile"
    if not C.check(exists(path), path, "exists"):
        return
    ins = dockerfile_instructions(read(path))
    stages = []  # [(name, image)]
    stage_ins = []  # per stage, its instructions
    global_args = {}  # ARGs before the first FROM: their defaults, usable in FROM
    for i, a in ins:
        if i == "ARG" and not stages:
            k, _, v = a.partition("=")
            global_args[k.strip()] = v.strip()
        if i == "FROM":
            words = a.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                           lambda m: global_args.get(m.group(1) or m.group(2), ""), words[0])
            if image != words[0]:
                C.check(bool(image), path, f"FROM {words[0]}: the build argument's default is {image}",
                        "no default before the first FROM")
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append((name, image))
            stage_ins.append([])
        elif stage_ins:
            stage_ins[-1].append((i, a))
    names = [n for n, _ in stages if n]
    C.check(len(stages) >= 2, path, f"multi-stage ({len(stages)} stages: {', '.join(names)})",
            "one FROM only")
    for n, image in stages:
        base = image if image not in names else None
        if base:
            C.check(re.match(r"^(docker\.io/(library/)?)?debian:(bookworm|12)([-.@].*)?$", base) is not None,
                    path, f"stage {n or '?'} is FROM Debian 12 ({base})", "not a Debian 12 image")
            C.check(re.search(r"@sha256:[0-9a-f]{64}$", base) is not None, path,
                    f"stage {n or '?'} pins its base by digest", f"FROM {base}")
    bases = {image for n, image in stages if image not in names}
    C.check(len(bases) == 1, path, "every stage starts from the same base (the libraries linked are "
            "the ones installed)", f"bases {sorted(bases)}")
    # The build stage uses the project's own package list.
    build_text = " ".join(a for i, a in stage_ins[0]) if stage_ins else ""
    uses_install_deps = "deploy/local/install-deps build" in build_text
    if not uses_install_deps:
        pkgs = re.search(r"build_pkgs=\(([^)]*)\)", read("deploy/local/install-deps"), re.S)
        missing = [p for p in (pkgs.group(1).split() if pkgs else []) if p not in build_text]
        C.check(not missing, path, "build stage installs deploy/local/install-deps' build_pkgs",
                f"missing {missing}")
    else:
        C.ok(f"{path}: build stage installs with deploy/local/install-deps build (its build_pkgs)")
    # The runtime image's OCI labels: its version is project()'s.
    run_text = read(path)
    lv = re.search(r"ARG TASKBOX_VERSION=([0-9.]+)", run_text)
    C.check(lv is not None and lv.group(1) == project_version(), path,
            f"the image's version label default is project()'s ({project_version()})",
            f"ARG TASKBOX_VERSION={lv.group(1) if lv else None}")
    for label in ("org.opencontainers.image.version", "org.opencontainers.image.revision",
                  "org.opencontainers.image.licenses=\"Apache-2.0\""):
        C.check(label in run_text, path, f"labels {label}")
    C.check("-DTB_REVISION=" in build_text, path, "the build names its commit (TB_REVISION)")
    cm = re.search(r"cmake\s+-S[^&]*", build_text)
    cmake_args = cm.group(0) if cm else ""
    C.check("-DCMAKE_BUILD_TYPE=Release" in cmake_args and "-DTB_SANITIZE=ON" not in cmake_args,
            path, "builds Release without sanitizers", f"cmake line: '{cmake_args}'")
    # Sources copied from the context exist and are not ignored.
    ignore_path = "deploy/container/Dockerfile.dockerignore"
    ignore = []
    if exists(ignore_path):
        ignore = ignore_patterns(read(ignore_path))
    copied_to = {}
    for si, ilist in enumerate(stage_ins):
        for i, a in ilist:
            if i not in ("COPY", "ADD"):
                continue
            words = shlex.split(a)
            flags = [w for w in words if w.startswith("--")]
            rest = [w for w in words if not w.startswith("--")]
            srcs, dst = rest[:-1], rest[-1]
            frm = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
            if frm:
                C.check(frm[0] in names[:si], path, f"COPY --from={frm[0]} names an earlier stage",
                        f"stages before it: {names[:si]}")
                continue
            for s in srcs:
                s = s.rstrip("/") or "."
                C.check(bool(glob.glob(os.path.join(SRC, s))), path, f"COPY source {s} exists",
                        "not in the repository")
                if ignore:
                    C.check(not dockerignore_excludes(ignore, s), ignore_path,
                            f"does not exclude {s}, which the Dockerfile copies", "it does")
                copied_to[s] = dst
    final = stage_ins[-1] if stage_ins else []
    final_text = " ".join(a for i, a in final)
    dev = re.findall(r"\b[\w.+-]+-dev\b|\bbuild-essential\b", final_text)
    C.check(not dev, path, "runtime stage installs no build packages", f"found {dev}")
    entry = [a for i, a in final if i == "ENTRYPOINT"]
    try:
        entry_v = json.loads(entry[-1]) if entry else None
    except ValueError:
        entry_v = entry[-1]
    C.check(entry_v == ["taskbox", "worker"], path, 'ENTRYPOINT ["taskbox", "worker"]', f"it is {entry_v}")
    exposed = [int(p.split("/")[0]) for i, a in final if i == "EXPOSE" for p in a.split()]
    if C.check(len(exposed) == 1, path, f"EXPOSEs one port, the metrics port ({exposed})", f"exposes {exposed}"):
        port_seen(f"{path} EXPOSE", exposed[0])
    if defaults:
        C.check(copied_to.get("examples/runtimes", "").rstrip("/") == defaults["runtimes_dir"], path,
                f"examples/runtimes copied to runtimes_dir {defaults['runtimes_dir']}",
                f"copied to {copied_to.get('examples/runtimes')}")
    # The default configuration the image runs with.
    cmd = [a for i, a in final if i == "CMD"]
    cmd_v = json.loads(cmd[-1]) if cmd else []
    conf = cmd_v[cmd_v.index("--config") + 1] if "--config" in cmd_v else None
    src = [s for s, d in copied_to.items() if d == conf]
    if C.check(bool(src), path, f"the CMD's configuration {conf} is copied from the repository",
               f"nothing is copied to {conf}"):
        schema_check("config", src[0])
        cfg = json.loads(read(src[0]))
        check_worker_config(src[0], cfg, defaults, "image default")
    check_runtime_libraries(path, final_text)


def check_docker_runs():
    """Every `docker run` of a worker in deploy/README.md shares the host's
    id registry (id_registry_dir): a worker alone in its own /run would
    hand out ranges another worker on the host holds."""
    reg = id_registry_dir()
    text = read("deploy/README.md")
    runs = re.findall(r"docker run(?:[^\n]*\\\n)*[^\n]*", text)
    C.check(runs, "deploy/README.md", "shows how to run the image (docker run)")
    for cmd in runs:
        C.check(reg is not None and f"-v {reg}:{reg}" in cmd, "deploy/README.md",
                f"docker run mounts the host's {reg} (the id registry)",
                cmd.splitlines()[0])


def check_runtime_libraries(path, final_text):
    """Every library the binary links directly comes from a package the
    runtime stage installs (or the base image's libc6)."""
    if not (shutil.which("objdump") and shutil.which("dpkg") and shutil.which("ldd")):
        C.note("objdump, ldd or dpkg missing: the runtime stage's libraries are not checked against the binary")
        return
    needed = re.findall(r"NEEDED\s+(\S+)", subprocess.run(["objdump", "-p", TASKBOX], capture_output=True,
                                                           text=True).stdout)
    where = {}
    for line in subprocess.run(["ldd", TASKBOX], capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
        if m:
            where[m.group(1)] = m.group(2)
    installed = set(re.findall(r"\b(lib[\w.+-]+|zlib1g|ca-certificates)\b", final_text))
    for lib in needed:
        if re.match(r"lib(asan|ubsan|tsan|lsan|hwasan)\.", lib):
            C.note(f"{lib}: a sanitizer runtime (this build has TB_SANITIZE; the image's has not)")
            continue
        pkg = None
        for p in (where.get(lib), os.path.realpath(where.get(lib, "")) if where.get(lib) else None):
            if not p:
                continue
            r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
            if r.returncode == 0:
                pkg = r.stdout.split(":")[0].strip()
                break
        if pkg is None:
            C.note(f"{lib}: no Debian package owns it here; not checked")
            continue
        if pkg == "libc6":
            C.ok(f"{path}: {lib} comes with the base image (libc6)")
            continue
        C.check(pkg in installed, path, f"runtime stage installs {pkg} for {lib}",
                "the binary links it and the image lacks it")


# ------------------------------------------------------------------ systemd

def parse_unit(text):
    sections, cur = {}, None
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith(("#", ";")):
            continue
        if s.startswith("[") and s.endswith("]"):
            cur = sections.setdefault(s[1:-1], {})
            continue
        if cur is None or "=" not in s:
            raise ValueError(f"not a section or key=value: {s}")
        k, _, v = s.partition("=")
        cur.setdefault(k.strip(), []).append(v.strip())
    return sections


def timespan_seconds(v):
    units = {"us": 1e-6, "ms": 1e-3, "s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
             "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600}
    if v.strip() == "infinity":
        return float("inf")
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", v):
        total += float(num) * units.get(unit or "s", float("nan"))
    return total


def id_registry_dir():
    """The directory holding the host's registry of sandbox id ranges, from
    the code (TB_SANDBOX_ID_REGISTRY's parent): every worker on a host must
    see the same one."""
    for h in glob.glob(os.path.join(SRC, "worker/**/sandbox_ids.h"), recursive=True):
        m = re.search(r'#define TB_SANDBOX_ID_REGISTRY "([^"]+)"', read(rel(h)))
        if m:
            return os.path.dirname(m.group(1))
    return None


def check_systemd(drain, defaults):
    path = "deploy/systemd/taskbox-worker.service"
    if not C.check(exists(path), path, "exists"):
        return
    try:
        u = parse_unit(read(path))
        C.ok(f"{path}: parses as a unit file (sections {', '.join(u)})")
    except ValueError as e:
        C.fail(path, str(e))
        return
    svc = u.get("Service", {})

    def one(key):
        v = svc.get(key)
        return v[-1] if v else None

    C.check("Description" in u.get("Unit", {}), path, "[Unit] Description")
    C.check("WantedBy" in u.get("Install", {}), path, "[Install] WantedBy")
    exe = (one("ExecStart") or "").split()
    C.check(len(exe) >= 2 and exe[0].endswith("/taskbox") and exe[1] == "worker", path,
            "ExecStart runs `taskbox worker`", f"ExecStart={one('ExecStart')}")
    want = {"KillSignal": "SIGTERM", "KillMode": "mixed", "Restart": "on-failure", "NoNewPrivileges": "yes",
            "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "OOMPolicy": "continue"}
    for k, v in want.items():
        C.check(one(k) == v, path, f"{k}={v}", f"it is {one(k)}")
    C.check(one("Delegate") not in (None, "no", "false"), path, f"Delegate= set ({one('Delegate')})",
            "the worker writes its cgroup subtree")
    C.check(one("LimitNOFILE") is not None, path, f"LimitNOFILE set ({one('LimitNOFILE')})")
    if drain is not None:
        t = timespan_seconds(one("TimeoutStopSec") or "0")
        C.check(t > drain, path, f"TimeoutStopSec ({t:g} s) > the drain timeout ({drain:g} s)")
    rw = " ".join(svc.get("ReadWritePaths", [])).split()
    for d in ("/var/lib/taskbox", "/var/cache/taskbox"):
        C.check(d in rw, path, f"ReadWritePaths has {d}", f"it has {rw}")
    if defaults:
        for key in ("work_dir", "cache_dir"):
            d = defaults[key]
            C.check(any(d == w or d.startswith(w.rstrip("/") + "/") for w in rw), path,
                    f"the default {key} {d} is writable", f"ReadWritePaths={rw}")
    for key, why in SYSTEMD_FORBIDDEN.items():
        C.check(key not in svc, path, f"{key}= not set", why)
    reg = id_registry_dir()
    if C.check(reg is not None, "worker/", "TB_SANDBOX_ID_REGISTRY is defined"):
        rt = " ".join(svc.get("RuntimeDirectory", [])).split()
        C.check(reg == "/run/" + (rt[0] if rt else ""), path,
                f"RuntimeDirectory makes the id registry's {reg} writable", f"RuntimeDirectory={rt}")
        C.check(one("RuntimeDirectoryPreserve") == "yes", path,
                "RuntimeDirectoryPreserve=yes (other workers on the host hold ranges there)")
    env_example = "deploy/systemd/worker.env.example"
    if C.check(exists(env_example), env_example, "exists"):
        text = read(env_example)
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            C.check(re.search(r"^#?\s*%s=" % var, text, re.M) is not None, env_example, f"names {var}")


def check_debian(docs, defaults):
    """The package's /etc/taskbox/worker.json: valid, the code's names, the
    runtimes where the package puts them, the metrics port everyone uses."""
    path = "deploy/debian/worker.json"
    if not C.check(path in docs, path, "exists and parses"):
        return
    cfg = docs[path][0]
    schema_check("config", path)
    if defaults:
        for key in ("group", "tasks_topic", "events_topic", "dlq_topic"):
            want = defaults["kafka"][key]
            got = cfg.get("kafka", {}).get(key, want)
            C.check(got == want, path, f"kafka.{key} is the code's default '{want}'", f"it is '{got}'")
    C.check(cfg.get("runtimes_dir") == "/etc/taskbox/runtimes", path,
            "runtimes_dir is /etc/taskbox/runtimes, where the package installs them",
            f"it is {cfg.get('runtimes_dir')}")
    port_seen(f"{path} metrics_listen", port_of(cfg.get("metrics_listen", "")))
    for s in ("postinst", "prerm", "postrm"):
        f = os.path.join(SRC, "deploy/debian", s)
        C.check(os.access(f, os.X_OK), f"deploy/debian/{s}", "is executable")


# --------------------------------------------------------------- Kubernetes

def container_of(dep):
    cs = dep["spec"]["template"]["spec"].get("containers", [])
    return cs[0] if cs else {}


def resolve_port(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def check_k8s(docs, defaults, drain, version):
    objs = k8s_objects(docs)
    deps = find_kind(objs, "Deployment")
    if not C.check(len(deps) == 1, "deploy/k8s", "one Deployment", f"found {len(deps)}"):
        return None
    dpath, dep = deps[0]
    # Labels everywhere.
    for (kind, n), (p, o) in sorted(objs.items()):
        labels = o.get("metadata", {}).get("labels", {})
        bad = {k: labels.get(k) for k, v in K8S_LABELS.items() if labels.get(k) != v}
        C.check(not bad, p, f"{kind} {n} carries the common labels", f"differs: {bad}")
    sel = dep["spec"]["selector"]["matchLabels"]
    tmpl = dep["spec"]["template"]["metadata"]["labels"]
    C.check(all(tmpl.get(k) == v for k, v in sel.items()), dpath,
            "the selector matches the pod template's labels", f"selector {sel}, template {tmpl}")
    C.check(all(tmpl.get(k) == v for k, v in K8S_LABELS.items()), dpath,
            "the pod template carries the common labels", f"template {tmpl}")
    C.check("replicas" not in dep["spec"], dpath, "no spec.replicas (KEDA owns the count)",
            "kubectl apply would reset the autoscaler's count")
    pod = dep["spec"]["template"]["spec"]
    c = container_of(dep)
    # Privileges as explained in the manifest.
    sc = c.get("securityContext", {})
    C.check(sc.get("privileged") is True, dpath, "the worker container is privileged",
            "the sandbox needs writable cgroups and an unmasked /proc")
    C.check(pod.get("hostUsers", True) is True, dpath, "the pod stays in the host user namespace",
            "hostUsers: false maps too few ids for the sandboxes")
    C.check(sc.get("allowPrivilegeEscalation", True) is True, dpath,
            "allowPrivilegeEscalation is not false", "the API rejects it together with privileged")
    C.check(sc.get("runAsUser", 0) == 0, dpath, "runs as root", f"runAsUser {sc.get('runAsUser')}")
    # Grace period.
    if drain is not None:
        g = pod.get("terminationGracePeriodSeconds", 30)
        C.check(g > drain, dpath, f"terminationGracePeriodSeconds ({g}) > the drain timeout ({drain:g} s)")
    # Image tag.
    image = c.get("image", "")
    if version:
        C.check(image.endswith(":" + version), dpath, f"image {image} is tagged with the project version {version}")
    # Configuration mounts.
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for mname in mounts:
        C.check(mname in vols, dpath, f"volumeMount {mname} has a volume", "no such volume")
    args = c.get("args", [])
    conf = args[args.index("--config") + 1] if "--config" in args else None
    cms = {n: o for (k, n), (p, o) in objs.items() if k == "ConfigMap"}
    cfg_text = None
    cfg = None
    for mname, m in mounts.items():
        v = vols.get(mname, {})
        if "configMap" not in v:
            continue
        cmname = v["configMap"]["name"]
        if not C.check(cmname in cms, dpath, f"ConfigMap {cmname} (volume {mname}) is defined",
                       "not in configmap.yaml"):
            continue
        data = cms[cmname].get("data", {})
        for key, text in data.items():
            full = m["mountPath"].rstrip("/") + "/" + key
            if full == conf:
                cfg_text = text
    if not C.check(cfg_text is not None, dpath, f"--config {conf} is a key of a mounted ConfigMap",
                   "no ConfigMap provides it"):
        return None
    cmpath = "deploy/k8s/configmap.yaml"
    try:
        cfg = json.loads(cfg_text)
        C.ok(f"{cmpath}: worker.json parses as JSON")
    except ValueError as e:
        C.fail(cmpath, f"worker.json does not parse: {e}")
        return None
    schema_check("config", cmpath + " (worker.json)", cfg_text)
    check_worker_config(cmpath, cfg, defaults, "worker.json")
    # Runtimes: the mount at runtimes_dir, each key a valid runtime.
    rdir = cfg.get("runtimes_dir", defaults["runtimes_dir"] if defaults else None)
    rmount = [m for m in mounts.values() if m["mountPath"].rstrip("/") == rdir]
    if C.check(bool(rmount), dpath, f"runtimes_dir {rdir} is a mounted volume", "nothing mounted there"):
        v = vols.get(rmount[0]["name"], {})
        cm = cms.get(v.get("configMap", {}).get("name"), {})
        for key, text in cm.get("data", {}).items():
            schema_check("runtime", f"{cmpath} ({key})", text)
            example = f"examples/runtimes/{key}"
            if exists(example):
                C.check(json.loads(text) == json.loads(read(example)), cmpath,
                        f"runtime {key} is the same as {example}", "the copy has drifted")
    # Writable paths with a read-only root.
    if sc.get("readOnlyRootFilesystem"):
        writable = {m["mountPath"].rstrip("/") for n, m in mounts.items()
                    if not m.get("readOnly") and ({"emptyDir", "persistentVolumeClaim", "ephemeral"} & set(vols.get(n, {})))}
        for key in ("work_dir", "cache_dir"):
            d = cfg.get(key) or (defaults or {}).get(key)
            C.check(d in writable, dpath, f"{key} {d} is a writable volume (the root is read-only)",
                    f"writable mounts: {sorted(writable)}")
    # The node's registry of id ranges: one for every worker pod on it.
    reg = id_registry_dir()
    shared = [m for n, m in mounts.items() if m["mountPath"].rstrip("/") == reg
              and vols.get(n, {}).get("hostPath", {}).get("path") == reg and not m.get("readOnly")]
    C.check(bool(shared), dpath, f"the id registry {reg} is the node's own (a writable hostPath mount)",
            "pods on one node would hand out the same host uids")
    # Secrets.
    secrets = {n: o for (k, n), (p, o) in objs.items() if k == "Secret"}
    env = {e["name"]: e for e in c.get("env", [])}
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        ref = env.get(var, {}).get("valueFrom", {}).get("secretKeyRef")
        if C.check(ref is not None, dpath, f"{var} comes from a Secret", "not a secretKeyRef"):
            s = secrets.get(ref["name"])
            if C.check(s is not None, "deploy/k8s/secret.example.yaml", f"defines Secret {ref['name']}"):
                keys = set(s.get("stringData", {})) | set(s.get("data", {}))
                C.check(ref["key"] in keys, "deploy/k8s/secret.example.yaml",
                        f"Secret {ref['name']} has key {ref['key']} ({var})", f"keys {sorted(keys)}")
    # Metrics port everywhere.
    cports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    if C.check("metrics" in cports, dpath, "a containerPort named metrics", f"ports {cports}"):
        port_seen(f"{dpath} containerPort metrics", cports["metrics"])
    # alive: the main loop turns; ready: its services answer (tb/health.h)
    for probe, want in (("startupProbe", "/healthz"), ("readinessProbe", "/readyz"),
                        ("livenessProbe", "/healthz")):
        pr = c.get(probe)
        if not C.check(pr is not None, dpath, f"{probe} defined"):
            continue
        hg = pr.get("httpGet", {})
        C.check(hg.get("path") == want, dpath, f"{probe} is GET {want}", f"path {hg.get('path')}")
        port_seen(f"{dpath} {probe}", resolve_port(c, hg.get("port")))
    ann = dep["spec"]["template"]["metadata"].get("annotations", {})
    if "prometheus.io/port" in ann:
        port_seen(f"{dpath} prometheus.io/port annotation", int(ann["prometheus.io/port"]))
        C.check(ann.get("prometheus.io/path", "/metrics") == "/metrics", dpath, "prometheus.io/path is /metrics")
    for spath, svc in find_kind(objs, "Service"):
        ssel = svc["spec"].get("selector", {})
        C.check(ssel and all(tmpl.get(k) == v for k, v in ssel.items()), spath,
                "Service selector matches the worker pods", f"selector {ssel}")
        sp = {p.get("name"): p for p in svc["spec"].get("ports", [])}
        m = sp.get("metrics")
        if C.check(m is not None, spath, "Service has a port named metrics"):
            port_seen(f"{spath} port metrics", m.get("port"))
            port_seen(f"{spath} port metrics targetPort", resolve_port(c, m.get("targetPort", m.get("port"))))
    for ppath, pdb in find_kind(objs, "PodDisruptionBudget"):
        C.check(pdb["spec"].get("selector", {}).get("matchLabels") == sel, ppath,
                "PodDisruptionBudget selector is the Deployment's", f"{pdb['spec'].get('selector')} vs {sel}")
    check_keda(objs, dep, cfg, defaults)
    check_kustomization(docs)
    check_servicemonitor(docs)
    return cfg


def check_keda(objs, dep, cfg, defaults):
    sos = find_kind(objs, "ScaledObject")
    if not C.check(len(sos) == 1, "deploy/k8s/keda-scaledobject.yaml", "one ScaledObject", f"found {len(sos)}"):
        return
    path, so = sos[0]
    ref = so["spec"]["scaleTargetRef"]
    C.check(ref.get("name") == dep["metadata"]["name"] and ref.get("kind", "Deployment") == "Deployment", path,
            f"scaleTargetRef is Deployment {dep['metadata']['name']}", f"it is {ref}")
    trig = [t for t in so["spec"].get("triggers", []) if t.get("type") == "kafka"]
    if not C.check(len(trig) == 1, path, "one kafka trigger"):
        return
    md = trig[0]["metadata"]
    k = cfg.get("kafka", {})
    C.check(md.get("bootstrapServers") == k.get("brokers"), path,
            f"bootstrapServers is worker.json's kafka.brokers ({k.get('brokers')})", f"it is {md.get('bootstrapServers')}")
    group = k.get("group", defaults["kafka"]["group"] if defaults else None)
    topic = k.get("tasks_topic", defaults["kafka"]["tasks_topic"] if defaults else None)
    C.check(md.get("consumerGroup") == group, path, f"consumerGroup is {group}", f"it is {md.get('consumerGroup')}")
    C.check(md.get("topic") == topic, path, f"topic is {topic}", f"it is {md.get('topic')}")
    C.check(str(md.get("lagThreshold")) == str(cfg.get("slots")), path,
            f"lagThreshold ({md.get('lagThreshold')}) is a worker's slots ({cfg.get('slots')})",
            "the comment in the file explains why they go together")
    C.check(md.get("offsetResetPolicy") == "earliest", path,
            "offsetResetPolicy earliest, as the worker's auto.offset.reset")
    parts = service_topics().get(topic)
    mx = so["spec"].get("maxReplicaCount")
    if parts:
        C.check(mx is not None and mx <= parts, path,
                f"maxReplicaCount ({mx}) <= the tasks topic's partitions ({parts}, deploy/local/services)")


def check_servicemonitor(docs):
    """The ServiceMonitor scrapes the Service that fronts the workers: it
    selects the Service's labels, on its port named metrics, at /metrics."""
    path, spath = "deploy/k8s/servicemonitor.yaml", "deploy/k8s/service.yaml"
    sm, svc = docs.get(path, [None])[0], docs.get(spath, [None])[0]
    if not C.check(isinstance(sm, dict) and sm.get("kind") == "ServiceMonitor", path,
                   "a ServiceMonitor (without one nothing scrapes the workers)"):
        return
    if not C.check(isinstance(svc, dict), spath, "present"):
        return
    want = sm["spec"].get("selector", {}).get("matchLabels", {})
    have = svc["metadata"].get("labels", {})
    C.check(want and all(have.get(k) == v for k, v in want.items()), path,
            "selects the workers' Service by its labels", f"selector {want}, labels {have}")
    ports = {p.get("name") for p in svc["spec"].get("ports", [])}
    for ep in sm["spec"].get("endpoints", []):
        C.check(ep.get("port") in ports, path, f"endpoint port {ep.get('port')} is the Service's",
                f"ports {sorted(ports)}")
        C.check(ep.get("path", "/metrics") == "/metrics", path, "scrapes /metrics")


def check_kustomization(docs):
    path = "deploy/k8s/kustomization.yaml"
    k = docs.get(path, [None])[0]
    if not C.check(isinstance(k, dict), path, "present"):
        return
    res = k.get("resources", [])
    for r in res:
        C.check(exists(os.path.join("deploy/k8s", r)), path, f"resource {r} exists")
    for f in sorted(glob.glob(os.path.join(SRC, "deploy/k8s/*.yaml"))):
        b = os.path.basename(f)
        if b in ("kustomization.yaml",) or b.endswith(".example.yaml"):
            continue
        C.check(b in res, path, f"lists {b}", "a manifest the kustomization leaves out")


# ------------------------------------------------------------------ compose

COMPOSE_VAR = re.compile(r"^\$\{(TASKBOX_\w+):-([^}]+)\}$")


def compose_default(v):
    """A compose value ${TASKBOX_X:-default}: (TASKBOX_X, default); any
    other value: (None, itself)."""
    m = COMPOSE_VAR.match(str(v))
    return (m.group(1), m.group(2)) if m else (None, str(v))


def dockerfile_base():
    """The Dockerfile's default for its BASE build argument."""
    for i, a in dockerfile_instructions(read("deploy/container/Dockerfile")):
        if i == "ARG" and a.partition("=")[0].strip() == "BASE":
            return a.partition("=")[2].strip()
    return None


def check_compose_images(path, svcs):
    """Every image (and the worker's BASE) may be named by a TASKBOX_*
    variable that deploy/README.md documents, defaulting to the upstream
    image, fully qualified (podman resolves no short name without a
    search registry): the README's way to run the stack where no
    registry is reachable (tests/deploy/compose_stack.py does so)."""
    readme, seen = read("deploy/README.md"), set()
    for n, s in svcs.items():
        var, image = compose_default(s.get("image", ""))
        if C.check(var is not None, path, f"service {n}'s image is ${{TASKBOX_..._IMAGE:-...}}",
                   f"image {s.get('image')}") and var not in seen:
            seen.add(var)
            C.check(f"`{var}`" in readme, path, f"{var} is documented in deploy/README.md")
        if "build" not in s:
            C.check("." in image.split("/")[0] and "/" in image, path,
                    f"service {n}'s default image {image} names its registry")
    for n, s in svcs.items():
        if "build" not in s:
            continue
        var, base = compose_default(s["build"].get("args", {}).get("BASE", ""))
        C.check(var is not None and f"`{var}`" in readme, path,
                f"service {n}'s build argument BASE is a documented variable ({var})")
        C.check(base == dockerfile_base(), path,
                f"service {n}'s BASE defaults to the Dockerfile's own", f"{base} != {dockerfile_base()}")


def check_compose(docs, defaults, drain, version):
    path = "deploy/compose/compose.yaml"
    d = docs.get(path, [None])[0]
    if not C.check(isinstance(d, dict) and "services" in d, path, "has services"):
        return
    svcs = d["services"]
    check_compose_images(path, svcs)
    workers = {n: s for n, s in svcs.items() if "build" in s}
    if not C.check(len(workers) >= 1, path, "a worker service built from the Dockerfile"):
        return
    for n, s in workers.items():
        b = s["build"]
        ctx = os.path.normpath(os.path.join(os.path.dirname(path), b.get("context", ".")))
        df = os.path.join(ctx, b.get("dockerfile", "Dockerfile"))
        C.check(os.path.normpath(df) == "deploy/container/Dockerfile", path,
                f"service {n} builds deploy/container/Dockerfile", f"it builds {df}")
        C.check(s.get("privileged") is True, path, f"service {n} is privileged (as the k8s Deployment)")
        reps = s.get("deploy", {}).get("replicas", 1)
        C.check(reps == 2, path, f"service {n} runs 2 replicas", f"replicas {reps}")
        if drain is not None:
            g = timespan_seconds(str(s.get("stop_grace_period", "10s")))
            C.check(g > drain, path, f"service {n} stop_grace_period ({g:g} s) > the drain timeout ({drain:g} s)")
        if version:
            image = compose_default(s.get("image", ""))[1]
            C.check(image.endswith(":" + version), path,
                    f"service {n} image {image} is tagged with the project version {version}")
        reg = id_registry_dir()
        vols = [v if isinstance(v, str) else f"{v.get('source')}:{v.get('target')}" for v in s.get("volumes", [])]
        C.check(f"{reg}:{reg}" in vols, path, f"service {n} shares the host's id registry {reg} (2 replicas, one host)",
                f"volumes {vols}")
        cmd = s.get("command", [])
        conf = cmd[cmd.index("--config") + 1] if "--config" in cmd else "/etc/taskbox/worker.json"
        src = None
        for v in s.get("volumes", []):
            parts = v.split(":") if isinstance(v, str) else [v.get("source"), v.get("target")]
            if len(parts) >= 2 and parts[1] == conf:
                src = os.path.normpath(os.path.join(os.path.dirname(path), parts[0]))
        if C.check(src is not None and exists(src), path, f"service {n}'s --config {conf} is mounted from a file here",
                   f"source {src}"):
            schema_check("config", src)
            cfg = json.loads(read(src))
            check_worker_config(src, cfg, defaults, "worker.json")
            ports = [int(str(x).rsplit(":", 1)[-1].split("/")[0]) for x in s.get("ports", [])]
            if C.check(len(ports) == 1, path, f"service {n} publishes one port, the metrics port", f"ports {ports}"):
                port_seen(f"{path} service {n} ports", ports[0])
            hosts = {"kafka": cfg["kafka"]["brokers"], "ledger": cfg["ledger"]["url"],
                     "store": cfg["store"].get("endpoint", "")}
            for what, url in hosts.items():
                # redis-sentinel://s1:26379,s2:26379/master names several
                for hp in re.sub(r"^[\w+-]+://", "", url).split("/")[0].split(","):
                    h = hp.split(":")[0]
                    C.check(h in svcs, src, f"{what} host '{h}' is a service of compose.yaml",
                            f"services {sorted(svcs)}")
            bucket = re.sub(r"^s3(v2)?://", "", cfg["store"]["url"]).split("/")[0]
            text = read(path)
            C.check(re.search(r"s3\.bucket\.create\s+-name\s+%s\b" % re.escape(bucket), text) is not None, path,
                    f"a job creates the bucket {bucket}", "no s3.bucket.create for it")
    # The topics job: the code's topic names, deploy/local/services' partitions.
    text = read(path)
    made = {t: int(p) for t, p in re.findall(r"\b(taskbox\.[\w-]+):(\d+)\b", text)}
    want = service_topics()
    if defaults:
        for key in ("tasks_topic", "events_topic", "dlq_topic"):
            t = defaults["kafka"][key]
            C.check(t in made, path, f"the topics job creates {t}", f"it creates {sorted(made)}")
            if t in made and t in want:
                C.check(made[t] == want[t], path, f"{t} has {want[t]} partitions, as deploy/local/services",
                        f"it has {made[t]}")
    s3 = [s for s in svcs.values() if "-s3.config=/etc/seaweedfs/s3.json" in " ".join(map(str, s.get("command", [])))]
    if s3:
        ids = json.loads(read("deploy/compose/s3.json"))["identities"]
        keys = {c["accessKey"] for i in ids for c in i["credentials"]}
        for n, s in workers.items():
            ak = s.get("environment", {}).get("AWS_ACCESS_KEY_ID")
            C.check(ak in keys, path, f"service {n}'s AWS_ACCESS_KEY_ID is an identity of s3.json", f"{ak} vs {keys}")


# ------------------------------------------------------------------ metrics

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
                "bool", "offset", "inf", "nan", "atan2"}


def promql_selectors(expr):
    """[(metric or None, {label: (op, value)})] for every vector selector of
    a PromQL expression (Grafana variables allowed): not the label names of
    by/on clauses, functions, keywords, numbers or durations."""
    strings = []

    def keep(m):
        strings.append(m.group(0)[1:-1])
        return '"%d"' % (len(strings) - 1)

    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', keep, expr)
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries: [5m], [30m:1m], [$__rate_interval]
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    out = []
    for m in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)?\s*(\{[^}]*\})?", s):
        name, braces = m.group(1), m.group(2)
        if not name and not braces:
            continue
        if name and not braces and (s[m.end():].lstrip().startswith("(") or name in PROMQL_WORDS):
            continue  # a function, an aggregation or a keyword
        matchers = {}
        for lm in re.finditer(r'(\w+)\s*(=~|!~|!=|=)\s*"(\d+)"', braces or ""):
            matchers[lm.group(1)] = (lm.group(2), strings[int(lm.group(3))])
        out.append((name, matchers))
    return out


def check_expr(path, where, expr, metrics):
    """Every metric an expression reads is one the worker exports (a
    histogram through _bucket, _sum or _count), with labels it has, and
    label values it uses."""
    sel = promql_selectors(expr)
    if not sel:
        C.fail(path, f"{where}: no metric in '{expr}'")
        return set()
    ok = True
    for name, matchers in sel:
        if name is None:
            C.fail(path, f"{where}: a selector with no metric name in '{expr}'")
            ok = False
            continue
        if name in PROMETHEUS_SERIES:
            continue
        base = name
        if name not in metrics:
            for suf in HISTOGRAM_SUFFIXES:
                if name.endswith(suf) and metrics.get(name[: -len(suf)]) == "histogram":
                    base = name[: -len(suf)]
                    break
            else:
                C.fail(path, f"{where}: metric '{name}' is not one the worker exports")
                ok = False
                continue
        elif metrics[name] == "histogram":
            C.fail(path, f"{where}: histogram '{name}' used without _bucket, _sum or _count")
            ok = False
            continue
        labels = set(CONTRACT.get(base, ("", set()))[1]) | TARGET_LABELS
        if name.endswith("_bucket"):
            labels.add("le")
        for label, (op, value) in matchers.items():
            if label not in labels:
                C.fail(path, f"{where}: {name} has no label '{label}' (it has {sorted(labels - TARGET_LABELS)})")
                ok = False
            elif label in LABEL_VALUES and "$" not in value:
                vals = value.split("|") if op in ("=~", "!~") else [value]
                bad = [v for v in vals if v not in LABEL_VALUES[label] and v != ".*"]
                if bad:
                    C.fail(path, f"{where}: {label} value(s) {bad} are not ones the worker uses")
                    ok = False
    names = {n for n, _ in sel if n}
    if ok:
        C.ok(f"{path}: {where} uses known metrics ({', '.join(sorted(names))})")
    return names


def check_alerts(docs, metrics):
    path = "deploy/prometheus/alerts.yaml"
    d = docs.get(path, [None])[0]
    if not C.check(isinstance(d, dict) and d.get("groups"), path, "has rule groups"):
        return
    used = set()
    for g in d["groups"]:
        for r in g.get("rules", []):
            name = r.get("alert") or r.get("record")
            C.check(bool(r.get("alert")) and bool(r.get("expr")), path, f"rule {name} has alert and expr")
            C.check(r.get("labels", {}).get("severity") in ("critical", "warning", "info"), path,
                    f"rule {name} has a severity", f"labels {r.get('labels')}")
            C.check(bool(r.get("annotations", {}).get("summary")), path, f"rule {name} has a summary")
            if "for" in r:
                C.check(re.fullmatch(r"(\d+[smhdwy])+", str(r["for"])) is not None, path,
                        f"rule {name} 'for' is a duration", f"it is {r['for']}")
            used |= check_expr(path, f"alert {name}", r["expr"], metrics)
    for need, why in (("taskbox_consumer_lag", "consumer lag"), ("taskbox_dlq_messages_total", "DLQ rate"),
                      ("taskbox_tasks_total", "tasks failing"), ("taskbox_phase_duration_seconds_bucket", "phase p99"),
                      ("taskbox_slots_busy", "slots saturated")):
        C.check(need in used, path, f"an alert on {why} ({need})", "missing")
    C.check("up" in used or "taskbox_worker_info" in used, path, "an alert on a worker down")
    pr = [o for ds in docs.values() for o in ds if isinstance(o, dict) and o.get("kind") == "PrometheusRule"]
    for o in pr:
        C.check(o.get("spec", {}).get("groups") == d["groups"], "deploy/k8s/prometheus-rules.yaml",
                f"PrometheusRule groups are the same as {path}", "they differ: copy alerts.yaml's groups again")


def grafana_exprs(node, where=""):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                yield where, v
            else:
                title = node.get("title", where) if isinstance(node.get("title"), str) else where
                yield from grafana_exprs(v, title)
    elif isinstance(node, list):
        for v in node:
            yield from grafana_exprs(v, where)


def check_dashboard(docs, metrics):
    path = "deploy/grafana/taskbox.json"
    d = docs.get(path, [None])[0]
    if not C.check(isinstance(d, dict) and d.get("panels"), path, "a dashboard with panels"):
        return
    C.check(bool(d.get("uid")) and bool(d.get("title")), path, f"has uid and title ({d.get('uid')})")
    n = 0
    for where, expr in grafana_exprs(d.get("panels", [])):
        check_expr(path, f"panel '{where}'", expr, metrics)
        n += 1
    for var in d.get("templating", {}).get("list", []):
        q = var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if var.get("type") == "query" and isinstance(q, str):
            m = re.match(r"label_values\((.*),\s*(\w+)\)\s*$", q)
            check_expr(path, f"variable ${var.get('name')}", m.group(1) if m else q, metrics)
    C.check(n > 0, path, f"{n} panel queries checked")
    ids = [p.get("id") for p in d["panels"]]
    C.check(len(ids) == len(set(ids)), path, "panel ids are unique", f"ids {ids}")


# --------------------------------------------------------------------- main

def main():
    global SRC, TASKBOX
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    TASKBOX, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if not os.access(TASKBOX, os.X_OK):
        print(f"FAIL  {TASKBOX}: not an executable")
        return 1
    print(f"checking {SRC}/deploy with {TASKBOX}")
    defaults = code_defaults()
    drain = drain_seconds(defaults)
    version = project_version()
    C.check(version is not None, "CMakeLists.txt", f"project version read ({version})")
    metrics = metric_names()
    docs = load_all()
    check_dockerfile(defaults)
    check_docker_runs()
    check_systemd(drain, defaults)
    check_debian(docs, defaults)
    check_k8s(docs, defaults, drain, version)
    check_compose(docs, defaults, drain, version)
    ports = {p for _, p in PORTS}
    if len(ports) == 1:
        C.ok(f"deploy: the metrics port is {ports.pop()} in all {len(PORTS)} places that name it")
    else:
        common = max(ports, key=lambda x: sum(1 for _, p in PORTS if p == x))
        for where, p in PORTS:
            if p != common:
                C.fail(where.split(" ")[0], f"metrics port is {p} in {where}; elsewhere it is {common}")
    for f in sorted(glob.glob(os.path.join(SRC, "examples/runtimes/*.json"))):
        schema_check("runtime", rel(f))  # the image ships them
    check_alerts(docs, metrics)
    check_dashboard(docs, metrics)
    print(f"\n{C.passed} checks passed, {C.failed} failed")
    return 1 if C.failed else 0


if __name__ == "__main__":
    sys.exit(main())
