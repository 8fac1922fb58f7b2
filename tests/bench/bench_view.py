#!/usr/bin/env python3
"""bench_view.py: `taskbox view`'s figures (`tests/bench/run view`), in
headless Chromium against the real Kafka:

  a task page of 10,000 events   from navigating to it until it is drawn
                                 (target: under 1 s)
  the list of 10,000 tasks       its first page: the API's time and bytes,
                                 and the page drawn (it never loads all)
  the server's memory            its RSS idle, and its peak while 20 pages
                                 watch 20 running tasks live, each task
                                 writing 20 events a second for 10 s
                                 (target: under 30 MiB)

Events are produced straight onto a topic of the run's own (as workers
write them, schemas/event.md). Usage: bench_view.py TASKBOX [--json].
Needs TASKBOX_TEST_* (the services) and chromium, chromium-driver and
python3-selenium.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import msgpack
from confluent_kafka import Producer
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

TB = sys.argv[1]
AS_JSON = "--json" in sys.argv
ENV = os.environ
RUN = "bench-view-%d" % os.getpid()
ROWS = []


def row(name, unit, median, p99, baseline=None, base=0.0):
    if AS_JSON:
        r = {"suite": "view", "name": name, "unit": unit, "median": round(median, 3),
             "p99": round(p99, 3)}
        if baseline:
            r.update(baseline=baseline, ratio=round(median / base, 2) if base else 0)
        ROWS.append(r)
        return
    prec = 3 if unit == "ms" else 2
    line = "  %-8s %-44s %10.*f %10.*f %-7s" % ("view", name, prec, median, prec, p99, unit)
    if baseline:
        line += "  %.2fx %s" % (median / base if base else 0, baseline)
    print(line, flush=True)


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def event(task, seq, ts, kind, payload, source="agent", attempt=1):
    return msgpack.packb({"schema": "event", "v": 1, "task_id": task, "attempt": attempt,
                          "seq": seq, "ts": ts, "type": kind, "source": source,
                          "payload": payload}, use_bin_type=True)


def conversation(task, n, t0):
    """n events of one attempt, as an agent's run makes them."""
    out = [event(task, 0, t0, "phase", {"phase": "received", "duration_ms": 0}, "worker"),
           event(task, 1, t0 + 1, "message", {"role": "user", "text": "the prompt"}, "worker")]
    seq = 2
    while seq < n - 1:
        k = seq % 5
        if k == 0:
            p, kind = {"role": "assistant", "text": "step %d: " % seq + "words " * 20}, "message"
        elif k == 1:
            p, kind = {"text": "thinking about step %d " % seq * 3}, "thought"
        elif k == 2:
            p, kind = {"id": "c%d" % seq, "name": "run", "input": {"cmd": "ls -la /w/%d" % seq}}, \
                "tool-call"
        elif k == 3:
            p, kind = {"id": "c%d" % (seq - 1), "output": "file %d\n" % seq * 4}, "tool-result"
        else:
            p, kind = {"method": "GET", "host": "api.example", "path": "/v1/%d" % seq,
                       "status": 200, "bytes_in": 10, "bytes_out": 5, "duration_ms": 3}, "egress"
        out.append(event(task, seq, t0 + seq, kind, p, "worker" if kind == "egress" else "agent"))
        seq += 1
    out.append(event(task, seq, t0 + seq, "result", {"outcome": "succeeded"}, "worker"))
    return out


def main():
    if not ENV.get("TASKBOX_TEST_KAFKA"):
        print("bench view: needs TASKBOX_TEST_* (deploy/local/services env)", file=sys.stderr)
        return 1
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([os.path.join(root, "deploy/local/services"), "topic", RUN + ".tasks:4",
                    RUN + ".events:4", RUN + ".dlq:1"], check=True, capture_output=True)
    tmp = tempfile.mkdtemp(prefix="tb-bench-view-")
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump({"v": 1, "worker_id": RUN,
                   "kafka": {"brokers": ENV["TASKBOX_TEST_KAFKA"], "group": RUN,
                             "tasks_topic": RUN + ".tasks", "events_topic": RUN + ".events",
                             "dlq_topic": RUN + ".dlq"},
                   "ledger": {"url": ENV["TASKBOX_TEST_REDIS"], "prefix": RUN},
                   "store": {"url": "dir://" + os.path.join(tmp, "store")}}, f)
    p = Producer({"bootstrap.servers": ENV["TASKBOX_TEST_KAFKA"], "linger.ms": 20})
    t0 = int(time.time() * 1000) - 3600_000
    big = RUN + "-big"
    for i, ev in enumerate(conversation(big, 10000, t0)):
        p.produce(RUN + ".events", key=big, value=ev)
        if i % 1000 == 0:
            p.poll(0)
    for i in range(10000):
        tid = "%s-%05d" % (RUN, i)
        for ev in (event(tid, 0, t0 + i, "phase", {"phase": "received", "duration_ms": 0}, "worker"),
                   event(tid, 1, t0 + i + 1, "result", {"outcome": "succeeded"}, "worker")):
            p.produce(RUN + ".events", key=tid, value=ev)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)

    view = subprocess.Popen([TB, "view", "--config", cfg, "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = re.search(r"(http://127\.0\.0\.1:\d+)/", view.stdout.readline()).group(1)
        for _ in range(600):  # the topic read: at most a minute
            got = json.loads(urllib.request.urlopen(base + "/api/tasks?limit=1").read())
            if got.get("caught_up") and got["total"] >= 10001:
                break
            time.sleep(0.1)
        idle = rss_kib(view.pid)

        # the list's first page, from the API
        times, size = [], 0
        for _ in range(9):
            t = time.monotonic()
            body = urllib.request.urlopen(base + "/api/tasks").read()
            times.append((time.monotonic() - t) * 1000)
            size = len(body)
        times.sort()
        row("list of 10,001 tasks: first page (API)", "ms", statistics.median(times), times[-1])
        row("  its size (50 tasks, not 10,001)", "KiB", size / 1024, size / 1024)

        opts = webdriver.ChromeOptions()
        opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1400,1000"):
            opts.add_argument(a)
        service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
        browser = webdriver.Chrome(service=service, options=opts)
        try:
            def drawn(path, flag="ready"):
                browser.get(base + path)
                for _ in range(500):
                    ms = browser.execute_script(
                        "return document.body.dataset.%s === '1' ? performance.now() : null"
                        % flag)
                    if ms is not None:
                        return ms
                    time.sleep(0.02)
                raise RuntimeError(path + " was not drawn in 10 s")

            lists = sorted(drawn("/") for _ in range(5))
            row("list page drawn (first 50 of 10,001)", "ms", statistics.median(lists), lists[-1])
            pages, parts = [], []
            for _ in range(5):
                pages.append(drawn("/task/" + big))
                parts.append(browser.execute_script(
                    "const m = {}; for (const e of performance.getEntriesByType('mark'))"
                    " m[e.name] = e.startTime; return m"))
            pages.sort()
            whole = sorted(drawn("/task/" + big, "complete") for _ in range(3))
            while not browser.execute_script("return document.body.dataset.complete === '1'"):
                time.sleep(0.05)
            n = browser.execute_script(
                "return document.querySelectorAll('#conversation .ev').length")
            row("task page of 10,000 events drawn", "ms", statistics.median(pages), pages[-1],
                "target < 1000", 1000.0)
            row("  all its 6,000 entries in the page", "ms", statistics.median(whole), whole[-1])
            row("  its conversation's entries", "n", n, n)

            # 20 pages watching 20 running tasks live: four browsers of
            # five windows (a browser keeps six connections to a host, and
            # each page's stream is one)
            live = ["%s-live-%02d" % (RUN, i) for i in range(20)]
            for tid in live:
                p.produce(RUN + ".events", key=tid, value=event(
                    tid, 0, int(time.time() * 1000), "phase", {"phase": "received"}, "worker"))
            p.flush(30)
            time.sleep(1)
            others = [webdriver.Chrome(service=Service(
                executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                options=opts) for _ in range(3)]
            browsers = [browser] + others
            for k, tid in enumerate(live):
                b = browsers[k // 5]
                if k % 5:
                    b.switch_to.new_window("window")
                b.get(base + "/task/" + tid)
            peak, stop = [idle], threading.Event()

            def sample():
                while not stop.is_set():
                    peak.append(rss_kib(view.pid))
                    time.sleep(0.1)
            th = threading.Thread(target=sample)
            th.start()
            seqs = {tid: 1 for tid in live}
            end = time.time() + 10
            while time.time() < end:
                tick = time.time()
                for tid in live:
                    p.produce(RUN + ".events", key=tid, value=event(
                        tid, seqs[tid], int(time.time() * 1000), "message",
                        {"role": "assistant", "text": "live " + "x" * 200}))
                    seqs[tid] += 1
                p.poll(0)
                time.sleep(max(0, 0.05 - (time.time() - tick)))
            p.flush(30)
            time.sleep(1)
            stop.set()
            th.join()
            want = seqs[live[0]] - 1  # the messages each task wrote
            shown, wait_until = 0, time.time() + 10
            while time.time() < wait_until and shown < want:
                shown = min(b.execute_script(
                    "return document.querySelectorAll('#conversation .ev').length")
                    for b in browsers for h in b.window_handles if not b.switch_to.window(h))
                time.sleep(0.2)
            for b in others:
                b.quit()
            row("server RSS, idle with 10,001 tasks", "MiB", idle / 1024, idle / 1024)
            row("server RSS, peak: 20 pages live", "MiB", max(peak) / 1024, max(peak) / 1024,
                "target < 30", 30.0)
            row("  events shown live, fewest of a page's", "n", shown, shown,
                "of %d written" % want, float(want))
        finally:
            browser.quit()
    finally:
        view.terminate()
        view.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    if AS_JSON:
        print(json.dumps(ROWS, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
