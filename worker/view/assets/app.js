// taskbox view: the page. Hand-written, no library: nothing to vendor,
// pin or build. Everything a task produced (prompts, agent output, tool
// arguments and results, artifact names, judge reasons, labels) is
// data: it reaches the page only through text nodes (el() below), never
// innerHTML, and a link is only ever one of the viewer's own paths.
"use strict";

const main = document.getElementById("main");
let leaving = []; // what the current page must stop when another opens

// An element: attributes from a plain object, children as nodes or
// strings (text, never markup).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "href") e.setAttribute("href", ownPath(v));
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

// Only the viewer's own paths are links: nothing an agent wrote can
// become a javascript: or outside URL.
function ownPath(p) {
  return typeof p === "string" && p.startsWith("/") && !p.startsWith("//") && !p.includes("\\")
    ? p : "#";
}

function navLink(path, ...kids) {
  return el("a", { href: path, "data-nav": "" }, ...kids);
}

const csrf = (document.querySelector('meta[name="taskbox-csrf"]') || {}).content || "";

// A change: a POST of JSON with the page's CSRF token.
async function act(path, body) {
  const r = await fetch(path, { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", "X-Taskbox-CSRF": csrf } });
  const out = await r.json().catch(() => ({ error: "not JSON (" + r.status + ")" }));
  if (!r.ok) throw new Error(out.error || String(r.status));
  return out;
}

async function api(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await r.json().catch(() => ({ error: "not JSON (" + r.status + ")" }));
  if (!r.ok) throw new Error(body.error || String(r.status));
  return body;
}

function when(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  return d.toLocaleString();
}

function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return Math.round(s) + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

function dur(ms) {
  if (ms === undefined || ms === null) return "";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

function bytes(n) {
  if (typeof n !== "number") return "";
  if (n < 1024) return n + " B";
  if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
  if (n < 1073741824) return (n / 1048576).toFixed(1) + " MiB";
  return (n / 1073741824).toFixed(2) + " GiB";
}

function badge(status) {
  return el("span", { class: "badge " + String(status || "").replace(/[^a-z-]/g, "") },
    status || "?");
}

function shortRecipe(url) {
  if (!url) return "";
  const parts = String(url).split("/");
  return parts[parts.length - 1] || url;
}

// ------------------------------------------------------------- tasks

const listState = { offset: 0, limit: 50 };

async function tasksPage() {
  const q = new URLSearchParams(location.search);
  const form = el("div", { class: "filters" });
  const search = el("input", { type: "search", placeholder: "task id", value: q.get("q") || "",
    "aria-label": "search by task id" });
  const recipe = el("select", { "aria-label": "recipe" }, el("option", { value: "" }, "any recipe"));
  const runtime = el("select", { "aria-label": "runtime" }, el("option", { value: "" }, "any runtime"));
  const status = el("select", { "aria-label": "status" },
    ["", "running", "queued", "retrying", "succeeded", "failed", "timed-out", "oom-killed",
      "error", "budget", "cancelled", "dead-lettered"].map(
      (s) => el("option", { value: s }, s || "any status")));
  const since = el("select", { "aria-label": "time" },
    [["", "any time"], ["3600", "last hour"], ["86400", "last day"], ["604800", "last week"]].map(
      ([v, t]) => el("option", { value: v }, t)));
  status.value = q.get("status") || "";
  since.value = q.get("since") || "";
  form.append(search, recipe, runtime, status, since);
  const table = el("table", { id: "tasks" });
  const pager = el("div", { class: "pager" });
  main.replaceChildren(el("h1", {}, "Tasks"), form, table, pager);

  let first = true;
  async function load() {
    const p = new URLSearchParams();
    if (search.value) p.set("q", search.value);
    if (recipe.value) p.set("recipe", recipe.value);
    if (runtime.value) p.set("runtime", runtime.value);
    if (status.value) p.set("status", status.value);
    if (since.value) p.set("since", String(Date.now() - Number(since.value) * 1000));
    p.set("offset", listState.offset);
    p.set("limit", listState.limit);
    let data;
    try {
      data = await api("/api/tasks?" + p);
    } catch (e) {
      table.replaceChildren(el("tr", {}, el("td", {}, "Cannot list the tasks: " + e.message)));
      return;
    }
    if (first) {
      for (const r of data.recipes) recipe.append(el("option", { value: r }, shortRecipe(r)));
      for (const r of data.runtimes) runtime.append(el("option", { value: r }, r));
      recipe.value = q.get("recipe") || "";
      runtime.value = q.get("runtime") || "";
      first = false;
    }
    const head = el("tr", {}, ["task", "status", "recipe", "runtime", "attempts", "took",
      "verdicts", "last active"].map((h) => el("th", {}, h)));
    const rows = data.tasks.map((t) => el("tr", { "data-task": t.id },
      el("td", { class: "id" }, navLink("/task/" + encodeURIComponent(t.id), t.id)),
      el("td", {}, badge(t.status), t.phase && t.status === "running" && t.phase !== t.status
        ? el("span", { class: "muted" }, " " + t.phase) : ""),
      el("td", { title: t.recipe || "" }, shortRecipe(t.recipe)),
      el("td", {}, t.runtime || ""),
      el("td", {}, String(t.attempts)),
      el("td", {}, dur(t.duration_ms)),
      el("td", {}, t.verdicts.total ? t.verdicts.pass + " / " + t.verdicts.total + " pass" : ""),
      el("td", { title: when(t.last_ts) }, ago(t.last_ts))));
    table.replaceChildren(head, ...rows);
    const to = Math.min(data.total, data.offset + data.tasks.length);
    pager.replaceChildren(
      el("button", { disabled: listState.offset === 0 ? "" : null, onclick: () => {
        listState.offset = Math.max(0, listState.offset - listState.limit); load(); } }, "← newer"),
      el("span", { class: "muted", id: "count" },
        data.total ? (data.offset + 1) + "–" + to + " of " + data.total : "no task"),
      el("button", { disabled: to >= data.total ? "" : null, onclick: () => {
        listState.offset += listState.limit; load(); } }, "older →"),
      data.caught_up ? "" : el("span", { class: "muted" }, " (still reading the topics)"));
  }
  function refilter() {
    listState.offset = 0;
    const p = new URLSearchParams();
    for (const [k, e] of [["q", search], ["recipe", recipe], ["runtime", runtime],
      ["status", status], ["since", since]]) if (e.value) p.set(k, e.value);
    history.replaceState(null, "", "/" + (p.toString() ? "?" + p : ""));
    load();
  }
  for (const e of [recipe, runtime, status, since]) e.addEventListener("change", refilter);
  search.addEventListener("input", refilter);
  await load();
  const timer = setInterval(() => { if (document.activeElement !== search) load(); }, 5000);
  leaving.push(() => clearInterval(timer));
}

// -------------------------------------------------------------- task

// A name the agent wrote, inside a label: shown as written (the label's
// upper case is the style sheet's, never the agent's text).
function asWritten(v) {
  return el("span", { class: "as-written" }, String(v ?? ""));
}

// What one event looks like in the conversation; null for those shown
// elsewhere (phases, egress, artifacts, verdicts, usage).
function renderEvent(ev, calls) {
  const p = ev.payload || {};
  switch (ev.type) {
    case "message": {
      const role = String(p.role || "");
      const prompt = role === "user" && ev.source === "worker";
      return el("div", { class: "ev " + (role === "user" ? "user" : "assistant"),
        "data-seq": ev.seq, "data-prompt": prompt ? "" : null },
        el("div", { class: "who" }, prompt ? "prompt" : role + (ev.source === "agent" &&
          role === "user" ? " (written by the agent)" : "")),
        el("div", { class: "text" }, String(p.text ?? "")));
    }
    case "thought":
      return el("details", { class: "ev thought", "data-seq": ev.seq },
        el("summary", {}, "thought"), el("div", { class: "text" }, String(p.text ?? "")));
    case "tool-call": {
      const result = el("div", {}, el("div", { class: "who" }, "result"),
        el("pre", { class: "muted" }, "(waiting)"));
      const box = el("div", { class: "ev tool", "data-seq": ev.seq },
        el("div", {}, el("div", { class: "who" }, "tool call: ", asWritten(p.name)),
          el("pre", {}, JSON.stringify(p.input ?? null, null, 2))), result);
      if (p.id !== undefined) calls.set(String(p.id), { box, result });
      return box;
    }
    case "tool-result": {
      const call = calls.get(String(p.id));
      const out = el("pre", {}, typeof p.output === "string" ? p.output
        : JSON.stringify(p.output ?? null, null, 2));
      const label = el("div", { class: "who" }, p.is_error ? "result: error" : "result");
      if (call) {
        call.result.replaceChildren(label, out);
        if (p.is_error) call.box.classList.add("failed-call");
        return null;
      }
      return el("div", { class: "ev tool" + (p.is_error ? " failed-call" : ""),
        "data-seq": ev.seq }, el("div", {}, el("div", { class: "who" },
        "tool result for ", asWritten(p.id ?? "?"))), el("div", {}, label, out));
    }
    case "error":
      return el("div", { class: "ev error", "data-seq": ev.seq },
        el("div", { class: "who" }, "error: " + String(p.code ?? "") +
          (p.phase ? " in " + p.phase : "")),
        el("div", { class: "text" }, String(p.reason ?? "")));
    case "turn":
      return p.state === "turn-started"
        ? el("div", { class: "ev turn" }, "turn " + String(p.turn ?? "")) : null;
    case "result":
      return el("div", { class: "ev " + (p.outcome === "succeeded" ? "" : "error") },
        el("div", { class: "who" }, "result"),
        el("div", {}, badge(p.outcome), p.reason ? " " + String(p.reason) : ""));
    default:
      return null;
  }
}

// A task that will change no more: an outcome, or dead-lettered.
function finished(status) {
  return !["running", "queued", "retrying"].includes(status);
}

// Whether an attempt's events say how it ended: its result, or its
// torn-down (an attempt given up retryably has no result).
function ended(events) {
  return events.some((e) => e.type === "result" || (e.type === "phase" &&
    ["torn-down", "acknowledged"].includes(String(e.payload.phase))));
}

function timeline(events) {
  const phases = events.filter((e) => e.type === "phase");
  const box = el("div", { class: "timeline", id: "timeline" });
  if (phases.length < 2) {
    box.append(el("span", { class: "muted" }, "No phases yet."));
    return box;
  }
  // A phase event's duration_ms is the time from the previous phase to
  // this one (schemas/event.md): the bar is named for the phase reached,
  // so "judged" holds the judging and "settled" the agent's run.
  const spans = [];
  for (let i = 1; i < phases.length; i++) {
    const ms = typeof phases[i].payload.duration_ms === "number"
      ? phases[i].payload.duration_ms : phases[i].ts - phases[i - 1].ts;
    spans.push([String(phases[i].payload.phase), String(phases[i - 1].payload.phase), ms]);
  }
  const most = Math.max(1, ...spans.map((s) => s[2]));
  for (const [name, from, ms] of spans) {
    const bar = el("div", { class: "bar" });
    bar.style.width = (100 * ms / most).toFixed(2) + "%"; // CSSOM: allowed by the CSP
    box.append(el("div", { class: "bar-row", title: "from " + from + " to " + name },
      el("span", {}, name), el("div", {}, bar), el("span", { class: "muted" }, dur(ms))));
  }
  return box;
}

function verdicts(events) {
  const list = events.filter((e) => e.type === "verdict");
  if (!list.length) return el("p", { class: "muted" }, "No verdicts.");
  return el("table", { id: "verdicts" },
    el("tr", {}, ["judge", "outcome", "score", "reason"].map((h) => el("th", {}, h))),
    list.map((e) => el("tr", {}, el("td", {}, String(e.payload.judge ?? "")),
      el("td", {}, badge(e.payload.outcome)),
      el("td", {}, e.payload.score === undefined ? "" : String(e.payload.score)),
      el("td", { class: "text" }, String(e.payload.reason ?? "")))));
}

function artifacts(manifest) {
  const list = (manifest && manifest.artifacts) || [];
  const refused = (manifest && manifest.refused) || [];
  const notSaved = refused.length ? el("table", { id: "refused" },
    el("tr", {}, ["not saved", "why"].map((h) => el("th", {}, h))),
    refused.map((r) => el("tr", {}, el("td", { class: "id" }, String(r.path ?? "")),
      el("td", {}, String(r.reason ?? ""))))) : "";
  if (!list.length) return el("div", {}, el("p", { class: "muted" }, "No files saved."), notSaved);
  return el("div", {}, el("table", { id: "artifacts" },
    el("tr", {}, ["file", "size", "sha256", ""].map((h) => el("th", {}, h))),
    list.map((a) => el("tr", {},
      el("td", { class: "id" }, String(a.path ?? "")),
      el("td", {}, bytes(a.size)),
      el("td", { class: "id muted" }, String(a.sha256 ?? "")),
      el("td", {}, el("a", { href: "/api/artifact?key=" + encodeURIComponent(String(a.key)),
        download: "" }, "download"), " ", shareButton(String(a.key)))))), notSaved);
}

// "share": a signed URL of the file, valid a day, shown to be copied.
function shareButton(key) {
  const out = el("span", {});
  const button = el("button", { class: "share", onclick: async () => {
    button.disabled = true;
    try {
      const r = await act("/api/share", { key, seconds: 86400 });
      const box = el("input", { class: "shared", readonly: "", value: r.url, size: 40 });
      out.replaceChildren(box);
      box.select();
    } catch (e) {
      out.replaceChildren(el("span", { class: "muted" }, e.message));
    }
    button.disabled = false;
  } }, "share");
  return el("span", {}, button, " ", out);
}

// An interactive task's session: a further prompt, or its end.
function sessionBox(id) {
  const text = el("textarea", { id: "followup", rows: 3, placeholder: "a further prompt",
    "aria-label": "a further prompt" });
  const note = el("span", { class: "muted", id: "followup-note" });
  const send = el("button", { id: "send", onclick: async () => {
    if (!text.value.trim()) return;
    send.disabled = true;
    try {
      const r = await act("/api/followup", { id, text: text.value });
      note.textContent = "sent as follow-up " + r.seq;
      text.value = "";
    } catch (e) { note.textContent = e.message; }
    send.disabled = false;
  } }, "Send");
  const end = el("button", { id: "end", onclick: async () => {
    end.disabled = true;
    try {
      const r = await act("/api/end", { id });
      note.textContent = "the session ends after what was sent (" + r.seq + ")";
    } catch (e) { note.textContent = e.message; end.disabled = false; }
  } }, "End the session");
  return el("div", { class: "session" }, el("h2", {}, "Session"), text,
    el("div", { class: "pager" }, send, end, note));
}

const EGRESS_SHOWN = 200; // the latest; the rest on asking

function egress(events, all) {
  const every = events.filter((e) => e.type === "egress");
  if (!every.length) return el("p", { class: "muted" }, "No requests out.");
  const list = all ? every : every.slice(-EGRESS_SHOWN);
  const box = el("div", {});
  const more = every.length > list.length ? el("button", { onclick: () =>
    box.replaceChildren(egress(events, true)) }, "show all " + every.length) : "";
  box.append(more, el("table", { id: "egress" },
    el("tr", {}, ["", "request", "status", "in", "out", "took", "why"].map((h) => el("th", {}, h))),
    list.map((e) => {
      const p = e.payload;
      const refused = p.reason !== undefined || p.status >= 400;
      return el("tr", {}, el("td", {}, badge(refused ? "refused" : "allowed")),
        el("td", { class: "id" }, String(p.method ?? "") + " " + String(p.host ?? "") +
          String(p.path ?? "") + (p.count ? " ×" + p.count : "")),
        el("td", {}, String(p.status ?? "")), el("td", {}, bytes(p.bytes_in)),
        el("td", {}, bytes(p.bytes_out)), el("td", {}, dur(p.duration_ms)),
        el("td", {}, String(p.reason ?? "")));
    })));
  return box;
}

// @unfinished: the attempt ended without word (its worker died): the
// figures are its last usage event's, and the page says so.
function usage(manifest, events, unfinished) {
  let u = manifest && manifest.usage, last;
  if (!u) {
    last = events.filter((e) => (e.type === "usage" || e.type === "result" ||
      e.type === "phase") && e.payload.usage).pop();
    u = last && last.payload.usage;
  }
  const note = unfinished ? el("p", { class: "muted", id: "usage-unfinished" }, u
    ? "What it had used at its last figures (" + when(last.ts) + "): the attempt ended " +
      "without word after them."
    : "No figures: the attempt ended without word before its first usage event.") : "";
  if (!u) return unfinished ? note : el("p", { class: "muted" }, "No figures yet.");
  // the accounting, as a person reads it (schemas/manifest.md, "usage");
  // a figure the kernel did not give is absent, and so is its row
  const cpu = (c) => c && (c.user_ms !== undefined || c.system_ms !== undefined)
    ? dur((c.user_ms || 0) + (c.system_ms || 0)) + " (user " + dur(c.user_ms || 0) +
      ", system " + dur(c.system_ms || 0) + ")" : undefined;
  const rows = [
    ["wall time", u.wall_ms === undefined ? undefined : dur(u.wall_ms)],
    ["agent CPU", cpu(u.agent)],
    ["judges' CPU", cpu(u.judges)],
    ["memory, peak", u.memory_peak_bytes === undefined ? undefined : bytes(u.memory_peak_bytes)],
    ["processes, peak", u.pids_peak],
    ["outputs", u.outputs_bytes === undefined ? undefined
      : bytes(u.outputs_bytes) + (u.saved_bytes === undefined ? ""
        : ", " + bytes(u.saved_bytes) + " saved")],
  ].filter((r) => r[1] !== undefined);
  const table = el("table", { id: "usage" },
    rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, String(v)))));
  const parts = [table];
  if (Array.isArray(u.inputs) && u.inputs.length)
    parts.push(el("h3", {}, "Inputs"), el("table", { id: "usage-inputs" },
      el("tr", {}, ["input", "size", "fetched", "read"].map((h) => el("th", {}, h))),
      u.inputs.map((i) => el("tr", {}, el("td", { class: "id" }, String(i.name ?? "")),
        el("td", {}, bytes(i.size)), el("td", {}, bytes(i.fetched_bytes)),
        el("td", {}, i.lazy ? "on demand" : "whole")))));
  if (Array.isArray(u.egress) && u.egress.length)
    parts.push(el("h3", {}, "Egress, by endpoint"), el("table", { id: "usage-egress" },
      el("tr", {}, ["endpoint", "requests", "refused", "up", "down", "upstream",
        "tokens in / out"].map((h) => el("th", {}, h))),
      u.egress.map((e) => el("tr", {}, el("td", {}, String(e.endpoint ?? "")),
        el("td", {}, String(e.requests ?? "")), el("td", {}, String(e.refused ?? "")),
        el("td", {}, bytes(e.bytes_up)), el("td", {}, bytes(e.bytes_down)),
        el("td", {}, dur(e.upstream_ms)),
        el("td", {}, e.input_tokens !== undefined ? String(e.input_tokens) + " / " +
          String(e.output_tokens ?? 0) : "")))));
  return el("div", {}, note, ...parts);
}

async function taskPage(id) {
  main.replaceChildren(el("p", { class: "muted" }, "Loading " + id + "…"));
  let info;
  try {
    info = await api("/api/task?id=" + encodeURIComponent(id));
  } catch (e) {
    main.replaceChildren(el("h1", {}, id), el("p", {}, e.message));
    return;
  }
  const attempts = info.attempt_list.map((a) => a.attempt);
  let chosen = attempts.length ? Math.max(...attempts) : 0;
  const head = el("div", {});
  const pick = el("div", { class: "attempts" });
  const body = el("div", {});
  const liveNote = el("span", { class: "live", id: "live" });
  main.replaceChildren(head, pick, body);

  function header(t) {
    head.replaceChildren(
      el("h1", {}, t.id, " ", badge(t.status)),
      el("div", { class: "meta" },
        el("span", {}, t.kind || ""),
        el("span", { title: t.recipe || "" }, "recipe " + shortRecipe(t.recipe) +
          (t.commit ? " @ " + String(t.commit).slice(0, 12) : "")),
        el("span", {}, "runtime " + (t.runtime || "")),
        el("span", {}, "submitted " + when(t.submitted_at)),
        Object.entries(t.labels || {}).map(([k, v]) => el("span", { class: "badge" }, k + "=" + v)),
        liveNote),
      t.reason ? el("p", { class: "ev error" }, String(t.reason)) : "");
  }
  header(info);

  // Live first, then the history: nothing falls between the two; an
  // event seen twice (same attempt and seq) is shown once.
  let events = null;
  const pending = [];
  const seen = new Set();
  // A browser keeps six connections to a host (HTTP/1.1), each stream one
  // of them: a page out of sight closes its stream, and opens it again,
  // reading what it missed, when it is looked at.
  let src = null, opened = 0, firstResolve, over = false, overTimer = 0;
  const firstOpen = new Promise((resolve) => {
    firstResolve = resolve;
    setTimeout(resolve, 3000); // no stream (too many pages watching): the history alone
  });
  // A finished task changes no more: it says so and holds no stream (a
  // browser has six connections to give). One seen ending live keeps its
  // stream for the attempt's last events (torn-down, acknowledged), at
  // most a few seconds, then reads the history once more.
  function finish(now) {
    over = true;
    liveNote.textContent = "finished";
    liveNote.className = "done";
    if (!src) return;
    if (!now) {
      if (!overTimer) overTimer = setTimeout(() => finish(true), 5000);
      return;
    }
    clearTimeout(overTimer);
    src.close();
    src = null;
    refetch();
  }
  function connect() {
    src = new EventSource("/api/live?id=" + encodeURIComponent(id));
    src.onopen = () => {
      liveNote.textContent = "● live";
      if (opened++ === 0) firstResolve();
      else refetch(); // reconnected: what was written meanwhile, read again
    };
    src.onerror = () => { liveNote.textContent = "○ reconnecting"; };
    src.addEventListener("behind", () => {
      src.close();
      liveNote.textContent = "reload for more";
    });
    src.onmessage = (m) => {
      const ev = JSON.parse(m.data);
      if (events === null) pending.push(ev);
      else add(ev);
    };
  }
  function onVisibility() {
    if (over) return;
    if (document.hidden && src) {
      src.close();
      src = null;
      liveNote.textContent = "○ paused";
    } else if (!document.hidden && !src) {
      connect();
    }
  }
  if (finished(info.status)) {
    finish(true);
    firstResolve();
  } else connect();
  document.addEventListener("visibilitychange", onVisibility);
  leaving.push(() => {
    document.removeEventListener("visibilitychange", onVisibility);
    clearTimeout(overTimer);
    if (src) src.close();
  });
  async function refetch() {
    if (events === null) return;
    try {
      let missed = 0;
      for (const ev of await api("/api/events?id=" + encodeURIComponent(id))) {
        const k = ev.attempt + ":" + ev.seq;
        if (!seen.has(k)) { seen.add(k); events.push(ev); missed++; }
      }
      if (missed) draw(); // in order again
    } catch (e) { /* the next reconnect tries again */ }
  }

  let conv, calls, session = null;
  function add(ev) {
    const k = ev.attempt + ":" + ev.seq;
    if (seen.has(k)) return;
    seen.add(k);
    events.push(ev);
    if (!attempts.includes(ev.attempt)) {
      attempts.push(ev.attempt);
      chosen = ev.attempt;
      drawAttempts();
      draw();
      return;
    }
    if (ev.attempt !== chosen) return;
    if (["phase", "verdict", "egress", "artifact", "usage", "result"].includes(ev.type)) {
      draw(); // the sections beside the conversation
      if (ev.type === "result") refreshHeader();
      if (over && ev.type === "phase" && ev.payload.phase === "acknowledged") finish(true);
      return;
    }
    if (queue.length) queue.push(ev); // after what is still to be drawn
    else {
      const node = renderEvent(ev, calls);
      if (node) place(conv, node);
    }
  }

  async function refreshHeader() {
    try {
      info = await api("/api/task?id=" + encodeURIComponent(id) + "&attempt=" + chosen);
      header(info);
      draw();
      if (finished(info.status) && !over) finish(false);
    } catch (e) { /* kept as it was */ }
  }

  function drawAttempts() {
    pick.replaceChildren(el("span", { class: "muted" }, "attempt "),
      ...attempts.sort((a, b) => a - b).map((n) => el("button", {
        class: n === chosen ? "on" : "", "data-attempt": n,
        onclick: async () => { chosen = n; drawAttempts(); await refreshHeader(); } }, String(n))));
  }

  // The conversation is drawn a piece at a time: the first FIRST entries
  // at once (the page is usable), then CHUNK more each turn of the event
  // loop, so a conversation of 10,000 events never freezes the page.
  const FIRST = 200, CHUNK = 1000;
  let queue = [], drawing = 0;
  // The worker records a turn's prompt, then its turn-started (schemas/
  // event.md, agent.md): the divider goes above the prompt just before it.
  function place(into, node) {
    const last = into.lastElementChild || conv.lastElementChild;
    if (node.classList.contains("turn") && last && last.dataset.prompt !== undefined)
      last.before(node);
    else into.append(node);
  }
  function drawSome(n) {
    const frag = document.createDocumentFragment();
    for (const ev of queue.splice(0, n)) {
      const node = renderEvent(ev, calls);
      if (node) place(frag, node);
    }
    conv.append(frag);
  }
  function drawRest(job) {
    if (job !== drawing) return; // drawn again meanwhile
    drawSome(CHUNK);
    if (queue.length) setTimeout(() => drawRest(job), 0);
    else document.body.dataset.complete = "1";
  }

  function draw() {
    const mine = events.filter((e) => e.attempt === chosen).sort((a, b) => a.seq - b.seq);
    calls = new Map();
    conv = el("div", { class: "conv", id: "conversation" });
    queue = mine.slice();
    delete document.body.dataset.complete;
    drawSome(FIRST);
    const job = ++drawing;
    if (queue.length) setTimeout(() => drawRest(job), 0);
    else document.body.dataset.complete = "1";
    const manifest = info.manifest_attempt === chosen ? info.manifest : null;
    const open = info.kind === "interactive" &&
      ["running", "queued", "retrying"].includes(info.status);
    if (open && !session) session = sessionBox(id); // built once: what is typed stays
    // an attempt with no end, when a later one exists or the task is over:
    // its worker died (nothing more will come of it), and the page says so
    const later = attempts.filter((a) => a > chosen);
    const unfinished = mine.length > 0 && !ended(mine) &&
      (later.length > 0 || finished(info.status));
    const lastPhase = mine.filter((e) => e.type === "phase").pop();
    const worker = (info.attempt_list.find((a) => a.attempt === chosen) || {}).worker;
    // what people look for first above the conversation, which may be long
    body.replaceChildren(
      unfinished ? el("p", { class: "ev error", id: "unfinished" },
        "Attempt " + chosen + " ended without word" +
        (lastPhase ? " after \u201c" + String(lastPhase.payload.phase) + "\u201d" : "") +
        ", its last event at " + when(mine[mine.length - 1].ts) + ": its worker" +
        (worker ? " (" + String(worker) + ")" : "") + " died, and nothing more came of it" +
        (later.length ? "; attempt " + Math.min(...later) + " took the task over." : ".")) : "",
      el("div", { class: "grid2" },
        el("div", {}, el("h2", {}, "Verdicts"), verdicts(mine)),
        el("div", {}, el("h2", {}, "Where the time went"), timeline(mine))),
      el("h2", {}, "Artifacts"), artifacts(manifest),
      el("h2", {}, "Conversation"), conv,
      open ? session : "",
      el("h2", {}, "Egress"), egress(mine),
      el("h2", {}, "Usage"), usage(manifest, mine, unfinished));
  }

  drawAttempts();
  await firstOpen; // subscribed before the history is read: nothing falls between
  performance.mark("live-open");
  let history;
  try {
    history = await api("/api/events?id=" + encodeURIComponent(id));
    performance.mark("events-read");
  } catch (e) {
    body.replaceChildren(el("p", {}, "Cannot read the events: " + e.message));
    return;
  }
  events = [];
  for (const ev of history) {
    const k = ev.attempt + ":" + ev.seq;
    if (!seen.has(k)) { seen.add(k); events.push(ev); }
  }
  for (const a of new Set(events.map((e) => e.attempt)))
    if (!attempts.includes(a)) attempts.push(a);
  if (attempts.length) chosen = Math.max(chosen, ...attempts);
  drawAttempts();
  draw();
  performance.mark("drawn");
  for (const ev of pending.splice(0)) add(ev);
  document.body.dataset.ready = "1"; // for the tests: the page is drawn
}

// ------------------------------------------------------------- fleet

const sentBack = new Map(); // DLQ records sent back from this page: "partition:offset" -> note

async function fleetPage() {
  main.replaceChildren(el("h1", {}, "Fleet"), el("p", { class: "muted" }, "Loading…"));
  async function load() {
    let f;
    try {
      f = await api("/api/fleet");
    } catch (e) {
      main.replaceChildren(el("h1", {}, "Fleet"), el("p", {}, e.message));
      return;
    }
    let dead = [];
    try { dead = await api("/api/dlq"); } catch (e) { /* shown empty */ }
    const dlq = dead.length ? el("table", { id: "dlq" },
      el("tr", {}, ["record", "task", "cause", "reason", "when", ""].map((h) => el("th", {}, h))),
      dead.map((d) => {
        const key = d.partition + ":" + d.offset;
        const note = el("span", { class: "muted" }, sentBack.get(key) || "");
        const back = d.task && d.cause !== "malformed" && !sentBack.has(key) ? el("button", {
          class: "send-back",
          onclick: async () => {
            back.disabled = true;
            try {
              const r = await act("/api/dlq/send", { partition: d.partition, offset: d.offset });
              note.textContent = "sent back: " + r.task;
              sentBack.set(key, note.textContent);
            } catch (e) { note.textContent = e.message; back.disabled = false; }
          } }, "send back") : "";
        return el("tr", { "data-task": d.task || "" },
          el("td", {}, d.partition + ":" + d.offset),
          el("td", { class: "id" }, d.task ? navLink("/task/" + encodeURIComponent(d.task), d.task)
            : "(no id)"),
          el("td", {}, String(d.cause)), el("td", { class: "text" }, String(d.reason)),
          el("td", { title: when(d.ts) }, ago(d.ts)), el("td", {}, back, " ", note));
      })) : el("p", { class: "muted" }, "The DLQ holds nothing.");
    const most = Math.max(1, ...f.rates.map((r) => r.succeeded + r.failed));
    const chart = el("div", { class: "chart", id: "rates" }, f.rates.map((r) => {
      const ok = el("div", { class: "ok" }), bad = el("div", { class: "bad" });
      ok.style.height = (100 * r.succeeded / most) + "%";
      bad.style.height = (100 * r.failed / most) + "%";
      return el("div", { class: "col", title: new Date(r.minute * 60000).toLocaleTimeString() +
        ": " + r.succeeded + " succeeded, " + r.failed + " failed" }, ok, bad);
    }));
    const done = f.rates.reduce((s, r) => s + r.succeeded + r.failed, 0);
    const failed = f.rates.reduce((s, r) => s + r.failed, 0);
    const lag = Array.isArray(f.lag)
      ? el("table", { id: "lag" }, el("tr", {}, ["partition", "committed", "end", "lag"].map(
        (h) => el("th", {}, h))), f.lag.map((p) => el("tr", {}, el("td", {}, String(p.partition)),
        el("td", {}, String(p.committed)), el("td", {}, String(p.end)), el("td", {}, String(p.lag)))))
      : el("p", { class: "muted" }, "Lag unknown: " + String((f.lag && f.lag.error) || ""));
    const workers = (f.workers || []).length ? el("table", { id: "workers" },
      el("tr", {}, ["worker", "slots", "running", "waiting", "finished", "heartbeat"].map(
        (h) => el("th", {}, h))),
      f.workers.map((w) => el("tr", { "data-worker": String(w.worker ?? "") },
        el("td", { class: "id" }, String(w.worker ?? w.unreadable ?? "")),
        el("td", {}, (w.tasks || []).length + " of " + String(w.slots ?? "?") + " busy"),
        el("td", {}, (w.tasks || []).map((t) => el("div", {},
          navLink("/task/" + encodeURIComponent(String(t.task)), String(t.task)),
          " #" + t.attempt + " slot " + t.slot + " " + String(t.phase ?? "") + " since " +
          ago(t.since_ms)))),
        el("td", {}, String(w.waiting ?? "")), el("td", {}, String(w.finished ?? "")),
        el("td", { title: when(w.heartbeat_ms) }, ago(w.heartbeat_ms)))))
      : el("p", { class: "muted" }, f.workers_error ? "Workers unknown: " + f.workers_error
        : "No worker alive.");
    // the dead letters first, where an operator looks: each one is a task
    // that needs a person (the table scrolls in its own box)
    main.replaceChildren(el("h1", {}, "Fleet"),
      el("h2", {}, "Dead letters" + (dead.length ? " (" + dead.length + ")" : "")),
      el("div", { class: "dlq-box" }, dlq),
      el("h2", {}, "Workers"), workers,
      el("h2", {}, "Results per minute, the last hour"), chart,
      el("p", { class: "muted" }, done + " results, " + failed + " not succeeded (" +
        (done ? (100 * failed / done).toFixed(1) : "0") + "%)"),
      el("h2", {}, "Consumer lag (tasks topic)"), lag,
      el("p", { class: "muted" }, "read " + f.feed.messages + " messages" +
        (f.feed.skipped ? ", skipped " + f.feed.skipped + " unreadable" : "")));
  }
  await load();
  const timer = setInterval(load, 10000);
  leaving.push(() => clearInterval(timer));
}

// ------------------------------------------------------------ routes

function route() {
  for (const stop of leaving.splice(0)) stop();
  delete document.body.dataset.ready;
  const path = location.pathname;
  if (path.startsWith("/task/")) return taskPage(decodeURIComponent(path.slice(6)));
  if (path === "/fleet") return fleetPage();
  return tasksPage().then(() => { document.body.dataset.ready = "1"; });
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-nav]");
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
  e.preventDefault();
  history.pushState(null, "", a.getAttribute("href"));
  route();
});
window.addEventListener("popstate", route);
route();
