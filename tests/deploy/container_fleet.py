#!/usr/bin/env python3
"""A fleet of worker containers (issue: run it the way operators do):
three containers of the worker image, each run as deploy/k8s's
deployment.yaml runs a pod (container_worker.start), sharing the host's
id-range registry, in one group on a tasks topic of 6 partitions. 100
tasks (each 2 s of agent work) are submitted with the Python client;
while they run, one container is killed (`podman kill -s KILL`, tasks
running in it) and started again at once under its name (a pod's
restart), and later another is stopped gracefully while it runs tasks
(`podman stop`, as a scale-down or a node drain stops a pod). The third
carries on; then the two still up are stopped gracefully too.

Counted from outside (the ledger's done-markers, the events topic, the
host), as the fault tests count:
  - every task done once, its counted attempt succeeded;
  - no two attempts of one task ran at the same time;
  - the killed container's tasks ran again within the lease
    (ledger.lease_ms, 15 s in the manifest's configuration): the
    restarted worker takes its leases over and its group rejoins once the
    killed member's Kafka session has expired (kafka.session_timeout...
    schemas/config.md says how long);
  - the restarted container was ready within the same bound;
  - the gracefully stopped container drained: each attempt it began
    ended there, and it exited 0; so did the others;
  - nothing orphaned on the host: no process in a sandbox cgroup of a
    fleet worker, no such cgroup, no mount under their directories,
    nothing left in their work directories.

Figures: start to ready of each container, the killed tasks' restart
delays, restart to ready, drain time, the batch's wall time.

Usage: container_fleet.py SOURCE_DIR TASKBOX (the host's, for recipes)
Skips (77) as container_worker.py does, or without the Python client's
modules (confluent_kafka, msgpack).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import podman as pm  # noqa: E402
from container_worker import layout  # noqa: E402
from fleet import (Fleet, Tally, events_by_attempt, overlaps, phase,  # noqa: E402
                   result_events, spans, submit_all)
from taskrun import Run  # noqa: E402

check = pm.check
TASKS = 100
LEASE_MS = 15000  # deploy/k8s/configmap.yaml's ledger.lease_ms (checked below)

AGENT = """#!/bin/sh
# two seconds of work, then one output: long enough that a kill or a
# stop finds tasks running in every container
read -r prompt
printf '{"type":"message","role":"assistant","text":"working"}\\n' >&3
sleep 2
echo "$prompt" > /outputs/done.txt
"""


def killed_restarts(events, worker, t_kill):
    """The tasks @p worker was running at @p t_kill (an attempt of its
    begun before and with no result): {task: seconds from the kill to the
    next attempt's start, or None if none came}."""
    sp = spans(events)
    results = result_events(events)
    out = {}
    for task, s in sp.items():
        for k, (began, _, attempt, w) in enumerate(s):
            if w == worker and began < t_kill and (task, attempt) not in results:
                nxt = s[k + 1][0] if k + 1 < len(s) else None
                out[task] = (nxt - t_kill) / 1000 if nxt else None
    return out


def drained(events, worker, t_stop):
    """The attempts @p worker had begun before @p t_stop that never got a
    result (a drain lets each one end): @return their (task, attempt)."""
    results = result_events(events)
    return [(task, a) for task, s in spans(events).items() for (began, _, a, w) in s
            if w == worker and began < t_stop and (task, a) not in results]


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    src, taskbox = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    pm.require()
    svc = pm.services()
    try:
        import confluent_kafka  # noqa: F401
        import msgpack  # noqa: F401
    except ImportError as e:
        pm.skip(f"the Python client needs {e.name} (tests/run installs it)")
    t_all = time.monotonic()
    image, _ = pm.worker_image(src)
    run = Run(src, taskbox, svc, "cfleet", partitions=6)
    with pm.Containers("cfleet") as cs:
        fleet = None
        try:
            vols = layout(run, src, svc.get("TASKBOX_TEST_REGISTRY", "127.0.0.1:1"))
            with open(os.path.join(vols["config"], "worker.json")) as f:
                lease = json.load(f)["ledger"]["lease_ms"]
            check(lease == LEASE_MS, f"the manifest's lease is {lease} ms")
            # (before the containers start: they mount the recipes' directory)
            recipe = run.recipe("work", {
                "taskbox.json": json.dumps({"v": 1, "name": "work",
                                            "agent": {"command": ["/bin/sh", "agent.sh"]}}),
                "agent.sh": AGENT})
            fleet = Fleet(run, vols, image=image, cs=cs)
            w = {}
            for what in ("w1", "w2", "w3"):
                w[what], took = fleet.start(what)
                pm.log(f"figure: container {what} start to ready {took:.2f} s")
            t0 = time.monotonic()
            ids = submit_all(src, run, recipe, TASKS, "cf")
            tally = Tally(src, run, ids)
            check(tally.wait(20, 300) >= 20, "20 tasks done before the kill")
            t_kill = time.time() * 1000
            fleet.kill(w["w1"])
            back = fleet.restart(w["w1"])
            pm.log(f"figure: killed container restarted, ready in {back:.2f} s")
            check(back < LEASE_MS / 1000 + 5, f"the restarted container ready within the lease "
                  f"({back:.1f} s)")
            check(tally.wait(50, 300) >= 50, "50 tasks done before the graceful stop")
            # stopped while it runs tasks, or the drain proves nothing
            gone, _ = pm.wait_for("w2 or w3 running a task", lambda: next(
                (x for x in ("w2", "w3") if w[x].busy()), None), 120, 0.05)
            stays = "w3" if gone == "w2" else "w2"
            t_stop = time.time() * 1000
            code, secs = fleet.stop(w[gone])
            check(code == 0, f"{gone} stopped gracefully in {secs:.1f} s, exit 0", f"exit {code}")
            done = tally.wait(TASKS, 600)
            took = time.monotonic() - t0
            check(done == TASKS, f"{done}/{TASKS} tasks done", f"{TASKS - done} not done")
            pm.log(f"figure: {TASKS} tasks in {took:.1f} s with a kill and a stop")
            for what in ("w1", stays):
                code, secs = fleet.stop(w[what])
                check(code == 0, f"{what} stopped gracefully in {secs:.1f} s, exit 0",
                      f"exit {code}\n{fleet.logs(w[what])}")
            events = events_by_attempt(src, run)
            results = result_events(events)
            bad = [i for i, d in tally.done.items()
                   if results.get((i, d.attempt), {}).get("outcome") != "succeeded"]
            check(not bad, "every task done once, its counted attempt succeeded",
                  f"{len(bad)}: {bad[:5]}")
            ran = overlaps(spans(events))
            check(not ran, "no two attempts of a task ran at once", "; ".join(ran[:5]))
            again = killed_restarts(events, w["w1"].name, t_kill)
            # the lease runs from the last heartbeat before the kill; a
            # worker polls a held lease: some slack for a loaded machine
            late = {t: s for t, s in again.items() if s is None or s > LEASE_MS / 1000 + 5}
            pm.log("figure: the killed container's tasks ran again after "
                   + ", ".join(f"{s:.1f}" if s is not None else "never"
                               for s in sorted(again.values(), key=lambda x: x or 1e9)) + " s")
            check(again and not late, f"the killed container's {len(again)} running tasks "
                  f"ran again within the lease", f"late: {late}")
            running = [(t, a) for t, s in spans(events).items() for (b, e, a, who) in s
                       if who == w[gone].name and b < t_stop <= e]
            check(running, f"the stopped container was running {len(running)} tasks")
            left = drained(events, w[gone].name, t_stop)
            check(not left, "every attempt the stopped container had begun ended there",
                  f"{left}")
            retried = sum(1 for (t, a) in events if a > 1)
            pm.log(f"figure: attempts after a task's first: {retried}")
            first = {t: phase(events[(t, 1)], "received") for t in ids if (t, 1) in events}
            check(all(first.values()) and len(first) == TASKS,
                  "each task's first attempt was received", f"{len(first)}")
            orphans = fleet.orphans()
            check(not orphans, "nothing orphaned on the host", "; ".join(orphans[:10]))
        except Exception as e:  # noqa: BLE001: reported, then the containers go
            check(False, "the run", f"{type(e).__name__}: {e}")
            for n in cs.names:
                pm.log(f"--- {n}\n{cs.logs(n)}")
        finally:
            if fleet:
                fleet.close()
            cs.close()
            subprocess.run(["rm", "-rf", run.dir])
    pm.log(f"\n{len(pm.failures)} failed; {time.monotonic() - t_all:.0f} s in all")
    return 1 if pm.failures else 0


if __name__ == "__main__":
    sys.exit(main())
