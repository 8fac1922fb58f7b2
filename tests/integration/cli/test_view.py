#!/usr/bin/env python3
"""`taskbox view` in a real browser (Debian's Chromium, headless, driven by
Selenium through chromedriver), against the real services and a worker.

Tasks run first: a one-shot hello, an interactive chat session with a
follow-up, one whose agent fails, one dead-lettered (its runtime does not
exist), and one whose agent writes hostile markup everywhere it can
(messages, a thought, tool calls and results, a file name, a label, a
judge's reason). Then `taskbox view` starts and the browser checks:

  - the list shows every task with its status, filters by status and
    finds a task by id;
  - a task's page shows its conversation in order (the prompt first, the
    tool call beside its result), its two verdicts, its phases, and its
    artifact, whose download (a real one, by Chromium) has the bytes the
    store holds;
  - the interactive task's turns are separated;
  - nothing the hostile agent wrote runs: no script, no handler, no
    dialog, and its text is shown as text;
  - a running task's page shows each new event live, within a second of
    the worker stamping it;
  - a shared URL of an artifact serves its bytes; a follow-up typed into
    an interactive task's page is answered, and the session ends from the
    page; a dead letter is sent back from the fleet page and succeeds;
  - started elsewhere than loopback it refuses to run without a token;
    with a token, nothing is answered without it (a bearer, or the cookie
    /login sets);
  - every answer carries the Content-Security-Policy, a request whose
    Host is not the loopback address it listens on is refused, and so is
    a change without the page's CSRF token or from another origin.

Screenshots of each page go to OUT_DIR. Usage: test_view.py TASKBOX
SOURCE_DIR OUT_DIR. Exit 77 (skipped) without the services or Chromium.
"""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

TB, ROOT, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
ENV = os.environ
if not ENV.get("TASKBOX_TEST_KAFKA") or not ENV.get("TASKBOX_TEST_S3_ENDPOINT"):
    print("skipped: TASKBOX_TEST_* not set (tests/run starts the services)")
    sys.exit(77)
try:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import (NoSuchElementException,
                                            StaleElementReferenceException)
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:
    print("skipped: no selenium (deploy/local/install-deps test installs python3-selenium)")
    sys.exit(77)
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMEDRIVER) or not os.path.exists(CHROMIUM):
    print("skipped: no chromium or chromedriver (deploy/local/install-deps test)")
    sys.exit(77)

failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else ": " + str(detail)[:2000]))
    if not ok:
        failures.append(what)


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


RUN = "tbview-%d" % os.getpid()
tmp = tempfile.mkdtemp(prefix="tb-view-")
os.chmod(tmp, 0o711)  # the sandboxes' users pass through to their work dirs
os.makedirs(OUT, exist_ok=True)
procs = []


def stop_all():
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ------------------------------------------------------------ the services

sh(os.path.join(ROOT, "deploy/local/services"), "topic", RUN + ".tasks:4", RUN + ".events:4",
   RUN + ".dlq:1")
ENV["AWS_ACCESS_KEY_ID"] = ENV["TASKBOX_TEST_S3_ACCESS_KEY"]
ENV["AWS_SECRET_ACCESS_KEY"] = ENV["TASKBOX_TEST_S3_SECRET_KEY"]
sh("curl", "-sf", "-X", "PUT", "--aws-sigv4", "aws:amz:%s:s3" % ENV["TASKBOX_TEST_S3_REGION"],
   "--user", ENV["AWS_ACCESS_KEY_ID"] + ":" + ENV["AWS_SECRET_ACCESS_KEY"],
   ENV["TASKBOX_TEST_S3_ENDPOINT"] + "/" + RUN)


def recipe(name, files, manifest):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(d, path)), exist_ok=True)
        with open(os.path.join(d, path), "w") as f:
            f.write(text)
    if manifest:
        with open(os.path.join(d, "taskbox.json"), "w") as f:
            json.dump(manifest, f)
    sh("git", "init", "-q", d)
    sh("git", "-C", d, "add", "-A")
    sh("git", "-C", d, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", name)
    return "file://" + d, sh("git", "-C", d, "rev-parse", "HEAD").strip()


def copied(name):
    d = os.path.join(tmp, name)
    shutil.copytree(os.path.join(ROOT, "examples/recipes", name), d)
    sh("git", "init", "-q", d)
    sh("git", "-C", d, "add", "-A")
    sh("git", "-C", d, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", name)
    return "file://" + d, sh("git", "-C", d, "rev-parse", "HEAD").strip()


hostile_agent = r"""read -r p
printf '%s\n' '{"type":"message","role":"assistant","text":"<script>window.__xss=\"message\"</script> and <img src=x onerror=\"window.__xss=\u0027img\u0027\">"}' >&3
printf '%s\n' '{"type":"thought","text":"javascript:window.__xss=\u0027link\u0027"}' >&3
printf '%s\n' '{"type":"tool-call","id":"t1","name":"<img src=x onerror=window.__xss=1>","input":{"html":"<script>window.__xss=2</script>","href":"javascript:window.__xss=3"}}' >&3
printf '%s\n' '{"type":"tool-result","id":"t1","output":"<svg onload=window.__xss=4></svg>","is_error":true}' >&3
printf 'hostile\n' > '/outputs/<img src=x onerror=window.__xss=5>.txt'
printf 'fine\n' > /outputs/fine.txt
"""
hostile_judge = r"""cat >/dev/null
printf '%s\n' '{"outcome":"fail","score":0.25,"reason":"<img src=x onerror=window.__xss=6> <a href=\"javascript:window.__xss=7\">click</a>"}'
"""
slow_agent = r"""read -r p
for i in 1 2 3 4 5 6; do
  printf '{"type":"message","role":"assistant","text":"tick %s"}\n' "$i" >&3
  sleep 1.5
done
"""
brief_agent = r"""read -r p
sleep 3
printf '%s\n' '{"type":"message","role":"assistant","text":"done"}' >&3
"""
failing_agent = "read -r p\nprintf '%s\\n' '{\"type\":\"message\",\"role\":\"assistant\",\"text\":\"giving up\"}' >&3\nexit 3\n"
pass_judge = "cat >/dev/null\necho '{\"outcome\":\"pass\"}'\n"

hello = copied("hello")
chat = copied("chat")
hostile = recipe("hostile", {"agent.sh": hostile_agent, "judge.sh": hostile_judge}, {
    "v": 1, "name": "hostile", "agent": {"command": ["/bin/sh", "agent.sh"]},
    "judges": [{"name": "judge", "command": ["/bin/sh", "judge.sh"]}]})
slow = recipe("slow", {"agent.sh": slow_agent, "judge.sh": pass_judge}, {
    "v": 1, "name": "slow", "agent": {"command": ["/bin/sh", "agent.sh"]},
    "judges": [{"name": "ok", "command": ["/bin/sh", "judge.sh"]}]})
brief = recipe("brief", {"agent.sh": brief_agent, "judge.sh": pass_judge}, {
    "v": 1, "name": "brief", "agent": {"command": ["/bin/sh", "agent.sh"]},
    "judges": [{"name": "ok", "command": ["/bin/sh", "judge.sh"]}]})
failing = recipe("failing", {"agent.sh": failing_agent, "judge.sh": pass_judge}, {
    "v": 1, "name": "failing", "agent": {"command": ["/bin/sh", "agent.sh"]},
    "judges": [{"name": "ok", "command": ["/bin/sh", "judge.sh"]}]})

os.makedirs(os.path.join(tmp, "runtimes"))
shutil.copy(os.path.join(ROOT, "examples/runtimes/default.json"), os.path.join(tmp, "runtimes"))
with open(os.path.join(ROOT, "examples/runtimes/default.json")) as f:
    ticking = json.load(f)  # a usage event every second: figures a dead worker leaves
ticking["name"] = "ticking"
ticking["agent"]["usage_interval_seconds"] = 1
with open(os.path.join(tmp, "runtimes", "ticking.json"), "w") as f:
    json.dump(ticking, f)
cfg = os.path.join(tmp, "worker.json")
with open(cfg, "w") as f:
    json.dump(worker_conf := {
        "v": 1, "worker_id": RUN, "slots": 2, "log_level": "info",
        "kafka": {"brokers": ENV["TASKBOX_TEST_KAFKA"], "group": RUN,
                  "tasks_topic": RUN + ".tasks", "events_topic": RUN + ".events",
                  "dlq_topic": RUN + ".dlq"},
        "ledger": {"url": ENV["TASKBOX_TEST_REDIS"], "prefix": RUN, "lease_ms": 6000},
        "store": {"url": "s3://" + RUN, "endpoint": ENV["TASKBOX_TEST_S3_ENDPOINT"],
                  "region": ENV["TASKBOX_TEST_S3_REGION"]},
        "runtimes_dir": os.path.join(tmp, "runtimes"), "work_dir": os.path.join(tmp, "work"),
        "cache_dir": os.path.join(tmp, "cache")}, f)
# a worker that dies mid-attempt: its own id, and a session the group
# gives up on soon, so that the next worker takes the task over
cfg_dies = os.path.join(tmp, "worker-dies.json")
with open(cfg_dies, "w") as f:
    json.dump(dict(worker_conf, worker_id=RUN + "-dies",
                   kafka=dict(worker_conf["kafka"],
                              properties={"session.timeout.ms": "6000"})), f)

try:
    worker_log = open(os.path.join(tmp, "worker.log"), "w")
    procs.append(subprocess.Popen([TB, "worker", "--config", cfg], stdout=worker_log,
                                  stderr=subprocess.STDOUT))

    def submit(url_commit, *extra, wait=True, want=0):
        url, commit = url_commit
        cmd = [TB, "submit", "--config", cfg, "--recipe", url, "--commit", commit, *extra]
        if wait:
            cmd += ["--wait", "--timeout", "180"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        check("submit %s exits %d" % (" ".join(extra[:2]), want), r.returncode == want,
              r.stdout[-1500:] + r.stderr[-1500:])
        return r.stdout.splitlines()[0].strip() if r.stdout else ""

    ids = {}
    ids["hello"] = submit(hello, "--prompt", "world", "--label", "team=view")
    ids["failing"] = submit(failing, "--prompt", "try", want=6)
    ids["dead"] = submit(hello, "--prompt", "nowhere", "--runtime", "nosuch", want=7)
    ids["hostile"] = submit(hostile, "--prompt", "<script>window.__xss='prompt'</script>",
                            "--label", "x=<img src=x onerror=window.__xss=8>")

    # an attempt whose worker dies (killed at "settled", after its usage
    # events), then the attempt a new worker makes of the task
    procs[0].terminate()
    procs[0].wait(60)
    dies = subprocess.Popen([TB, "worker", "--config", cfg_dies], stdout=worker_log,
                            stderr=subprocess.STDOUT, env=dict(ENV, TASKBOX_FAULT="settled"))
    ids["died"] = submit(brief, "--prompt", "die", "--runtime", "ticking", wait=False)
    try:
        dies.wait(120)
    except subprocess.TimeoutExpired:
        dies.kill()
        dies.wait()
    check("the worker died at the fault point", dies.returncode == -signal.SIGKILL,
          dies.returncode)
    procs.append(subprocess.Popen([TB, "worker", "--config", cfg], stdout=worker_log,
                                  stderr=subprocess.STDOUT))
    r = subprocess.run([TB, "watch", "--config", cfg, ids["died"], "--timeout", "180"],
                       capture_output=True, text=True, timeout=240)
    check("the task whose worker died is taken over and succeeds", r.returncode == 0,
          r.stdout[-1500:] + r.stderr[-1500:])
    ids["chat"] = submit(chat, "--prompt", "first question", "--interactive", wait=False)
    time.sleep(3)
    sh(TB, "send", "--config", cfg, ids["chat"], "second question")
    time.sleep(3)
    sh(TB, "end", "--config", cfg, ids["chat"])

    # ---------------------------------------------------------- the viewer
    view_log = open(os.path.join(tmp, "view.log"), "w")
    view = subprocess.Popen([TB, "view", "--config", cfg, "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=view_log, text=True)
    procs.append(view)
    line = view.stdout.readline()
    m = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
    check("taskbox view prints its address", m, line)
    base = m.group(1)

    # headers, and the Host check, without a browser
    with urllib.request.urlopen(base + "/") as r:
        csp = r.headers.get("Content-Security-Policy", "")
        check("the page has a strict CSP", "script-src 'self'" in csp and
              "unsafe-inline" not in csp and "default-src 'none'" in csp, csp)
        check("the page is nosniff", r.headers.get("X-Content-Type-Options") == "nosniff")
    req = urllib.request.Request(base + "/api/tasks", headers={"Host": "evil.example:80"})
    try:
        urllib.request.urlopen(req)
        check("a foreign Host is refused", False, "answered")
    except urllib.error.HTTPError as e:
        check("a foreign Host is refused", e.code == 421, e.code)

    # a download is a saved file's, nothing else of the store's
    for key in ("tasks/%s/1/conversation.msgpack" % ids["hello"],
                "tasks/%s/1/manifest.msgpack" % ids["hello"],
                "tasks/%s/1/outputs/../manifest.msgpack" % ids["hello"],
                "tasks/outputs/1/conversation.msgpack", "uploads/x/outputs/y"):
        try:
            urllib.request.urlopen(base + "/api/artifact?key=" + urllib.parse.quote(key))
            check("no download of " + key, False, "answered")
        except urllib.error.HTTPError as e:
            check("no download of " + key, e.code == 400, e.code)

    # elsewhere than loopback: refused without a token (before it binds)
    r = subprocess.run([TB, "view", "--config", cfg, "--listen", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=60)
    check("not loopback, no token: refused", r.returncode == 2 and "--token" in r.stderr,
          (r.returncode, r.stderr[-500:]))
    # with one, what it prints opens in a browser: a name or an address it
    # listens on (never 0.0.0.0), and the login URL with the token
    token = "t0ken-%d-abcdefgh" % os.getpid()
    wild = subprocess.Popen([TB, "view", "--config", cfg, "--listen", "0.0.0.0:0",
                             "--token", token], stdout=subprocess.PIPE, stderr=view_log)
    procs.append(wild)
    said = ""
    deadline = time.time() + 30
    while time.time() < deadline and said.count("\n") < 2:  # what it prints at start
        if select.select([wild.stdout], [], [], 0.5)[0]:
            got = os.read(wild.stdout.fileno(), 4096).decode()
            if not got:
                break
            said += got
    login = re.search(r"(http://[^/\s]+:\d+)/login\?token=(\S+)", said)
    check("--listen 0.0.0.0: no 0.0.0.0 in the URL printed", "0.0.0.0" not in said and
          re.search(r"http://[^/\s]+:\d+/\s", said), said)
    check("--listen 0.0.0.0: the login URL with the token", login and
          login.group(2) == token, said)
    if login:
        class NoRedirect0(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *a, **k):
                return None
        try:
            urllib.request.build_opener(NoRedirect0).open(login.group(0), timeout=10)
            opened = None
        except urllib.error.HTTPError as e:
            opened = e.code, e.headers.get("Set-Cookie", "")
        except OSError as e:
            opened = str(e)
        check("--listen 0.0.0.0: the login URL printed opens and logs in",
              isinstance(opened, tuple) and opened[0] in (302, 303) and
              "taskbox_view=" in opened[1], opened)
    wild.terminate()
    wild.wait(30)
    # with a token: nothing without it; /login sets it as a cookie
    token = "t0ken-%d-abcdefgh" % os.getpid()
    tv = subprocess.Popen([TB, "view", "--config", cfg, "--listen", "127.0.0.1:0",
                           "--token", token], stdout=subprocess.PIPE, stderr=view_log, text=True)
    procs.append(tv)
    tbase = re.search(r"(http://127\.0\.0\.1:\d+)/", tv.stdout.readline()).group(1)

    def status_of(url, headers=None):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {})) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    check("with a token, none: 401", status_of(tbase + "/api/tasks") == 401)
    check("with a token, a wrong one: 401", status_of(
        tbase + "/api/tasks", {"Authorization": "Bearer wrong-token-000000"}) == 401)
    check("with a token, the bearer: 200", status_of(
        tbase + "/api/tasks", {"Authorization": "Bearer " + token}) == 200)
    check("login with a wrong token: 403", status_of(tbase + "/login?token=nope") == 403)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None
    try:
        urllib.request.build_opener(NoRedirect).open(tbase + "/login?token=" + token)
        cookie = None
    except urllib.error.HTTPError as e:
        cookie = e.headers.get("Set-Cookie", "")
    check("login sets an HttpOnly, SameSite=Strict cookie", cookie and "HttpOnly" in cookie and
          "SameSite=Strict" in cookie, cookie)
    check("with the cookie: 200", cookie and status_of(
        tbase + "/api/tasks", {"Cookie": cookie.split(";")[0]}) == 200)
    tv.terminate()
    tv.wait(30)

    downloads = os.path.join(tmp, "downloads")
    os.makedirs(downloads)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1000"):
        opts.add_argument(a)
    opts.add_experimental_option("prefs", {"download.default_directory": downloads,
                                           "download.prompt_for_download": False})
    service = Service(executable_path=CHROMEDRIVER)
    browser = webdriver.Chrome(service=service, options=opts)
    browser.set_page_load_timeout(30)
    # every live stream a page opens, counted (before the page's script
    # runs, as the debugger runs it: not a script of the page's, no CSP)
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        (() => { const E = window.EventSource; window.__streams = [];
          window.EventSource = class extends E {
            constructor(...a) { super(...a); window.__streams.push(this); } }; })();"""})

    def open_streams():
        return browser.execute_script(
            "return window.__streams ? window.__streams.filter((s) => s.readyState !== 2).length"
            " : -1")

    def live_note():
        return " ".join(e.text for e in browser.find_elements(By.ID, "live"))

    def finished_quiet(what):
        # a finished task: it says so, and holds no stream open
        note, n = live_note(), open_streams()
        check(what + " says it is finished, not live", "finished" in note and
              "live" not in note, note)
        check(what + " holds no live stream open", n == 0, n)

    def as_shown(ms):  # the page's dur(), for the comparison below
        if ms < 1000:
            return ["%d ms" % ms]
        if ms < 60000:  # JS rounds a tie up, Python to even: either
            return ["%.1f s" % (ms / 1000), "%.1f s" % ((ms + 0.01) / 1000)]
        return None

    def wait_for(cond, seconds=20, what="the page"):
        try:
            # the page redraws parts of itself: an element found a moment
            # ago may be gone at the next line; looked for again
            return WebDriverWait(browser, seconds, poll_frequency=0.05,
                                 ignored_exceptions=(StaleElementReferenceException,
                                                     NoSuchElementException)).until(cond)
        except Exception as e:  # noqa: BLE001 (selenium's timeout, or a stale element)
            check(what, False, "%s; page: %s" % (e, browser.find_element(By.TAG_NAME, "body").text[:800]))
            return None

    def ready(_):
        return browser.execute_script("return document.body.dataset.ready === '1'")

    def shot(name):
        browser.save_screenshot(os.path.join(OUT, name + ".png"))

    try:
        # ------------------------------------------------------ the list
        browser.get(base + "/")
        wait_for(lambda b: all(b.find_elements(By.CSS_SELECTOR, 'tr[data-task="%s"]' % i)
                               for i in ids.values()), 60, "every task is listed")
        status = {i: browser.find_element(By.CSS_SELECTOR,
                                          'tr[data-task="%s"] .badge' % i).text
                  for i in ids.values()}
        check("statuses", status[ids["hello"]] == "succeeded" and
              status[ids["failing"]] == "failed" and
              status[ids["dead"]] == "dead-lettered", status)
        shot("tasks")
        Select(browser.find_element(By.CSS_SELECTOR, 'select[aria-label="status"]')) \
            .select_by_value("failed")
        wait_for(lambda b: [e.get_attribute("data-task") for e in
                            b.find_elements(By.CSS_SELECTOR, "tr[data-task]")] == [ids["failing"]],
                 10, "the status filter keeps the failed one")
        browser.get(base + "/")
        box = wait_for(lambda b: b.find_element(By.CSS_SELECTOR, 'input[type="search"]'))
        box.send_keys(ids["hello"])
        wait_for(lambda b: [e.get_attribute("data-task") for e in
                            b.find_elements(By.CSS_SELECTOR, "tr[data-task]")] == [ids["hello"]],
                 10, "the search finds the task by id")

        # ------------------------------------------------- a task's page
        browser.get(base + "/task/" + ids["hello"])
        wait_for(ready, 30, "the hello task's page is drawn")
        # (labels are upper case by the style sheet: compared in lower case)
        texts = [e.text.lower() for e in
                 browser.find_elements(By.CSS_SELECTOR, "#conversation .ev")]
        order = ["world", "received the prompt", "thought", "write_file", "hello, queue!"]
        at = [next((k for k, t in enumerate(texts) if o in t), -1) for o in order]
        check("the conversation in order", -1 not in at and at == sorted(at), (at, texts))
        check("the tool call beside its result", any("write_file" in t and "wrote" in t
                                                     for t in texts), texts)
        shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#conversation .ev")]
        check("the tool's name as the agent wrote it (not upper-cased)",
              any("write_file" in t for t in shown), shown)
        verdicts = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#verdicts tr")][1:]
        check("two verdicts, both pass", len(verdicts) == 2 and
              all("pass" in v for v in verdicts), verdicts)
        check("the phases as a timeline",
              len(browser.find_elements(By.CSS_SELECTOR, "#timeline .bar-row")) >= 8)
        # each bar is named for the phase event whose duration_ms it shows
        # (the time it took to reach that phase: "judged" is the judging)
        took = {e["payload"]["phase"]: e["payload"]["duration_ms"] for e in json.loads(
            urllib.request.urlopen(base + "/api/events?id=" + ids["hello"]).read())
            if e["type"] == "phase" and e["attempt"] == 1}
        bars = [[s.text for s in r.find_elements(By.TAG_NAME, "span")]
                for r in browser.find_elements(By.CSS_SELECTOR, "#timeline .bar-row")]
        check("each bar named for the phase whose time it shows",
              bars and "judged" in [b[0] for b in bars] and
              all(b[0] in took and b[-1] in (as_shown(took[b[0]]) or [b[-1]]) for b in bars),
              (bars, took))
        finished_quiet("a succeeded task's page")
        figures = browser.find_element(By.ID, "usage").text.lower()
        check("the accounting as a table", "wall time" in figures and "agent cpu" in figures,
              figures)
        shot("task")
        link = browser.find_element(By.CSS_SELECTOR, "#artifacts a")
        link.click()
        deadline = time.time() + 20
        got = None
        while time.time() < deadline and not got:  # Chromium writes elsewhere, then renames
            got = "hello.txt" if "hello.txt" in os.listdir(downloads) else None
            time.sleep(0.1)
        check("the artifact downloads", got == "hello.txt", os.listdir(downloads))
        if got:
            data = open(os.path.join(downloads, got), "rb").read()
            want = ("hello, queue! (task %s, attempt 1)\n" % ids["hello"]).encode()
            check("its bytes are the artifact's", data == want, data)

        # the interactive task: its turns apart
        browser.get(base + "/task/" + ids["chat"])
        wait_for(ready, 30, "the chat task's page is drawn")
        wait_for(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#conversation .turn")) >= 2,
                 30, "the interactive task's turns are separated")
        # each prompt under its own turn's divider (the worker records the
        # prompt, then the turn-started: the page puts the divider first)
        seq = [e.text.lower() for e in
               browser.find_elements(By.CSS_SELECTOR, "#conversation > *")]

        def at(pred):
            return next((k for k, t in enumerate(seq) if pred(t)), -1)
        t1, t2 = at(lambda t: t == "turn 1"), at(lambda t: t == "turn 2")
        p1, p2 = at(lambda t: "first question" in t), at(lambda t: "second question" in t)
        check("each prompt below its own turn's divider",
              -1 not in (t1, t2, p1, p2) and t1 < p1 < t2 < p2, seq)
        shot("interactive")

        # ------------------------------------------------- the XSS battery
        browser.get(base + "/task/" + ids["hostile"])
        wait_for(ready, 30, "the hostile task's page is drawn")
        time.sleep(1)  # an image's error handler would have run by now
        check("nothing the agent wrote ran",
              browser.execute_script("return window.__xss === undefined"),
              browser.execute_script("return String(window.__xss)"))
        body = browser.find_element(By.TAG_NAME, "body").text.lower()
        for needle in ("<script>window.__xss=\"message\"</script>",
                       "<img src=x onerror=window.__xss=1>", "<svg onload=window.__xss=4></svg>",
                       "<img src=x onerror=window.__xss=5>.txt",
                       "<img src=x onerror=window.__xss=6>",
                       "<a href=\"javascript:window.__xss=7\">click</a>",
                       "x=<img src=x onerror=window.__xss=8>"):
            check("shown as text: " + needle, needle in body, body[:3000])
        check("no markup of the agent's in the page",
              not browser.find_elements(By.CSS_SELECTOR, "main img, main svg, main script, "
                                                         "main b, main a[href^='javascript']"))
        shot("hostile")

        # the dead-lettered task: finished, no stream
        browser.get(base + "/task/" + ids["dead"])
        wait_for(ready, 30, "the dead-lettered task's page is drawn")
        finished_quiet("a dead-lettered task's page")

        # the attempt whose worker died says so, and shows its last figures
        browser.get(base + "/task/" + ids["died"])
        wait_for(ready, 30, "the page of the task whose worker died")
        check("the task whose worker died has two attempts",
              len(browser.find_elements(By.CSS_SELECTOR, "button[data-attempt]")) == 2)
        first = browser.find_elements(By.CSS_SELECTOR, 'button[data-attempt="1"]')
        if first:
            first[0].click()
            wait_for(lambda b: b.find_elements(By.ID, "unfinished"), 10,
                     "the attempt whose worker died says it ended without word")
            note = " ".join(e.text for e in browser.find_elements(By.ID, "unfinished"))
            check("it says its worker died", "worker" in note and "died" in note, note)
            figures = browser.find_element(By.TAG_NAME, "main").text
            check("its usage: the last figures, saying so, not 'No figures yet'",
                  "No figures yet" not in figures and
                  browser.find_elements(By.CSS_SELECTOR, "#usage") and
                  browser.find_elements(By.ID, "usage-unfinished"), figures[-1500:])
            shot("died")
        browser.get(base + "/")
        wait_for(ready, 30, "the list after the hostile task")
        check("nothing ran on the list either",
              browser.execute_script("return window.__xss === undefined"))

        # --------------------------------------------------------- live
        sid = submit(slow, "--prompt", "tick", wait=False)
        # its row in the list: the status said once
        deadline, phase = time.time() + 60, None
        while time.time() < deadline and phase != "running":
            got = json.loads(urllib.request.urlopen(base + "/api/tasks?q=" + sid).read())
            phase = got["tasks"][0]["phase"] if got["tasks"] else None
            time.sleep(0.1)
        browser.get(base + "/?q=" + sid)
        cell = wait_for(lambda b: b.find_element(
            By.CSS_SELECTOR, 'tr[data-task="%s"] td:nth-child(2)' % sid), 20, "the running row")
        words = cell.text.split() if cell else []
        check("a running task's row says running once", words.count("running") == 1, words)
        browser.get(base + "/task/" + sid)
        wait_for(ready, 60, "the running task's page is drawn")
        check("a running task's page is live", "live" in live_note(), live_note())
        browser.execute_script("""
            window.__seen = {};
            new MutationObserver(() => {
              for (const e of document.querySelectorAll('#conversation .ev[data-seq]'))
                if (!(e.dataset.seq in window.__seen)) window.__seen[e.dataset.seq] = Date.now();
            }).observe(document.getElementById('main'), {childList: true, subtree: true});
            for (const e of document.querySelectorAll('#conversation .ev[data-seq]'))
              window.__seen[e.dataset.seq] = -1;""")
        wait_for(lambda b: "tick 6" in b.find_element(By.ID, "conversation").text, 60,
                 "the last tick arrives live")
        seen = browser.execute_script("return window.__seen")
        events = json.loads(urllib.request.urlopen(
            base + "/api/events?id=" + sid).read())
        lags = [seen[str(e["seq"])] - e["ts"] for e in events
                if e["type"] == "message" and str(e["seq"]) in seen and seen[str(e["seq"])] > 0]
        check("live events appeared", len(lags) >= 2, seen)
        check("each within a second of the worker's stamp", lags and max(lags) < 1000, lags)
        print("  live: events shown %s ms after the worker stamped them" % lags)
        shot("live")
        # once it ends, the page says so and closes its stream
        wait_for(lambda b: "finished" in live_note() and open_streams() == 0, 60,
                 "the live page closes its stream when the task ends")
        finished_quiet("a task's page that saw it end")

        # --------------------------------------- changes, from the page
        # share: a signed URL of the artifact, fetched as anyone would
        browser.get(base + "/task/" + ids["hello"])
        wait_for(ready, 30, "the hello task's page again")
        browser.find_element(By.CSS_SELECTOR, "#artifacts button.share").click()
        box = wait_for(lambda b: b.find_element(By.CSS_SELECTOR, "input.shared"), 20,
                       "a shared URL is shown")
        if box:
            url = box.get_attribute("value")
            data = urllib.request.urlopen(url).read()
            check("the shared URL serves the artifact",
                  data == ("hello, queue! (task %s, attempt 1)\n" % ids["hello"]).encode(), data)

        # a follow-up and the end of a session, from its page
        cid = submit(chat, "--prompt", "hello there", "--interactive", wait=False)
        browser.get(base + "/task/" + cid)
        wait_for(ready, 60, "the session's page is drawn")
        wait_for(lambda b: "you said hello there" in b.find_element(By.ID, "conversation").text,
                 60, "the first turn's answer")
        browser.find_element(By.ID, "followup").send_keys("how are you")
        browser.find_element(By.ID, "send").click()
        wait_for(lambda b: "you said how are you" in b.find_element(By.ID, "conversation").text,
                 60, "the follow-up sent from the page is answered, live")
        browser.find_element(By.ID, "end").click()
        wait_for(lambda b: "bye after 2 turns" in b.find_element(By.ID, "conversation").text,
                 60, "the session ended from the page")
        shot("session")

        # a change without the page's CSRF token, or from another origin: refused
        page = urllib.request.urlopen(base + "/").read().decode()
        token = re.search(r'name="taskbox-csrf" content="([0-9a-f]{64})"', page).group(1)
        for what, headers in (("no CSRF token", {}),
                              ("another origin", {"X-Taskbox-CSRF": token,
                                                  "Origin": "http://evil.example"})):
            req = urllib.request.Request(base + "/api/end", method="POST",
                                         data=json.dumps({"id": cid}).encode(),
                                         headers={"Content-Type": "application/json", **headers})
            try:
                urllib.request.urlopen(req)
                check("a POST with " + what + " is refused", False, "answered")
            except urllib.error.HTTPError as e:
                check("a POST with " + what + " is refused", e.code == 403, e.code)

        # the dead letter sent back from the fleet page, once its runtime exists
        with open(os.path.join(ROOT, "examples/runtimes/default.json")) as f:
            rt = json.load(f)
        rt["name"] = "nosuch"
        with open(os.path.join(tmp, "runtimes", "nosuch.json"), "w") as f:
            json.dump(rt, f)
        browser.get(base + "/fleet")
        wait_for(lambda b: b.find_elements(By.CSS_SELECTOR, "#rates .col"), 20, "the fleet page")
        wait_for(lambda b: b.find_elements(By.CSS_SELECTOR, 'tr[data-worker="%s"]' % RUN), 20,
                 "the worker is listed with its slots")
        check("the chart shows this hour's results",
              any(e.size["height"] > 0 for e in
                  browser.find_elements(By.CSS_SELECTOR, "#rates .ok, #rates .bad")))
        shot("fleet")
        tops = browser.execute_script("""
            const top = (id) => { const e = document.getElementById(id);
              return e ? e.getBoundingClientRect().top : null; };
            return [top("dlq"), top("workers"), top("rates"), top("lag"), innerHeight];""")
        check("the dead letters above the workers, the chart and the lag, in view",
              None not in tops[:4] and tops[0] < min(tops[1:4]) and tops[0] < tops[4] / 2,
              tops)
        row = 'tr[data-task="%s"] button.send-back' % ids["dead"]
        button = wait_for(lambda b: b.find_element(By.CSS_SELECTOR, row), 20,
                          "the dead letter has a send-back button")
        if button:
            button.click()
            deadline = time.time() + 120
            st = None
            while time.time() < deadline and st != "succeeded":
                got = json.loads(urllib.request.urlopen(
                    base + "/api/tasks?q=" + ids["dead"]).read())
                st = got["tasks"][0]["status"] if got["tasks"] else None
                time.sleep(0.5)
            check("the task sent back from the page succeeds", st == "succeeded", st)
    finally:
        browser.quit()
finally:
    stop_all()
    if not failures and not ENV.get("KEEP"):
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("kept " + tmp)

print("view: %d failed" % len(failures))
sys.exit(1 if failures else 0)
