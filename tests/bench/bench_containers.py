#!/usr/bin/env python3
"""bench_containers.py: what running the workers in containers costs.

The worker image built by podman from deploy/container/Dockerfile (its
size), three workers started as containers with deploy/k8s's settings
(tests/deploy/container_worker.py) and, as the baseline, the same three
workers as bare processes of the host's Release build with the same
configuration (tests/deploy/fleet.py): start to ready of each, and the
throughput of the three on batches of the hello recipe (3 rounds of
TB_BENCH_FLEET_TASKS tasks, 150 by default, after a warm-up batch that
fills each worker's recipe cache), from the first submit to the last
done-marker. The ratio is the containers' to the processes'.

Usage: bench_containers.py SOURCE_DIR TASKBOX [--json]  (root; the
services' TASKBOX_TEST_* in the environment; podman, runc, mmdebstrap).
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
import podman as pm  # noqa: E402
from container_worker import layout  # noqa: E402
from fleet import Fleet, Tally, submit_all  # noqa: E402
from taskrun import Run  # noqa: E402

AS_JSON = "--json" in sys.argv
ROWS = []
WORKERS = ("w1", "w2", "w3")
ROUNDS = 3


def row(name, unit, median, p99, baseline=None, base=0.0):
    if AS_JSON:
        r = {"suite": "containers", "name": name, "unit": unit, "median": round(median, 3),
             "p99": round(p99, 3)}
        if baseline:
            r.update(baseline=baseline, ratio=round(median / base, 2) if base else 0)
        ROWS.append(r)
        return
    line = "  %-10s %-44s %10.2f %10.2f %-7s" % ("containers", name, median, p99, unit)
    if baseline:
        line += "  %.2fx %s" % (median / base if base else 0, baseline)
    print(line, flush=True)


def measure(src, taskbox, svc, kind, image, cs, tasks):
    """Three workers of @p kind; @return (seconds to ready of each,
    tasks/s of each round)."""
    run = Run(src, taskbox, svc, f"bc{kind[0]}", partitions=6)
    fleet = Fleet(run, None, image=image if kind == "containers" else None, cs=cs,
                  taskbox=None if kind == "containers" else taskbox)
    try:
        fleet.vols = layout(run, src, svc.get("TASKBOX_TEST_REGISTRY", "127.0.0.1:1"))
        hello = run.recipe("hello", copy="hello")
        ready = [fleet.start(w)[1] for w in WORKERS]
        ids = submit_all(src, run, hello, 12, "warm")
        Tally(src, run, ids).wait(12, 300)
        rates = []
        for r in range(ROUNDS):
            t0 = time.monotonic()
            ids = submit_all(src, run, hello, tasks, f"r{r}")
            done = Tally(src, run, ids).wait(tasks, 600)
            took = time.monotonic() - t0
            if done < tasks:
                raise RuntimeError(f"{kind}: {done}/{tasks} done in {took:.0f} s")
            rates.append(tasks / took)
        for w in fleet.workers.values():
            fleet.stop(w)
        return ready, rates
    finally:
        fleet.close()
        for n in list(cs.names):
            cs.remove(n)
        run.close()


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    src, taskbox = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    pm.require()
    svc = pm.services()
    tasks = int(os.environ.get("TB_BENCH_FLEET_TASKS", "150"))
    # the bench's own lines, not podman.check's
    pm.log = lambda *a: print(*a, file=sys.stderr, flush=True)
    image, build = pm.worker_image(src)
    size = int(pm.podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    base = int(pm.podman("image", "inspect", "--format", "{{.Size}}",
                         pm.worker_base()).stdout)
    row("worker image size", "MB", size / 1e6, size / 1e6, "its base", base / 1e6)
    with pm.Containers("bench") as cs:
        c_ready, c_rates = measure(src, taskbox, svc, "containers", image, cs, tasks)
        p_ready, p_rates = measure(src, taskbox, svc, "processes", None, cs, tasks)
    row("start to ready, 3 bare processes", "s", statistics.median(p_ready), max(p_ready))
    row(f"throughput, 3 bare processes ({tasks} tasks)", "tasks/s",
        statistics.median(p_rates), min(p_rates))
    row("start to ready, 3 workers", "s", statistics.median(c_ready), max(c_ready),
        "bare processes", statistics.median(p_ready))
    row(f"throughput, 3 workers x 4 slots ({tasks} tasks)", "tasks/s",
        statistics.median(c_rates), min(c_rates), "bare processes",
        statistics.median(p_rates))
    if AS_JSON:
        print(json.dumps(ROWS, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
