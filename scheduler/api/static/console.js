// The read-only ksched console: plain DOM over the JSON API, no build step (docs/decisions.md).
// Every value from the API is written with textContent / attributes, never parsed as HTML.
// The key comes from the form or once from the URL fragment (#key=...: a fragment is never sent
// to a server), is kept in this tab's sessionStorage, and the fragment is then rewritten without it.
// The rest of the fragment is the view: schedule, occurrence, the list's state, handler, limit
// and cursor, and the DLQ's page size and trail of cursors (dlq_limit, dlq); every link and the filter form only change it, and a change of it re-renders.
"use strict";

const KEY = "ksched.console.key";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : text(child));
  }
  return node;
}

function text(value) {
  return document.createTextNode(value === null || value === undefined ? "—" : String(value));
}

function link(changes, label, id) {
  return el("a", { href: hrefWith(changes), id }, label);
}

function stateCell(s) {
  return el("span", { class: "state state-" + String(s).replace(/[^A-Z_]/g, "") }, s);
}

function table(columns, rows, id) {
  const head = el("tr", {}, ...columns.map((c) => el("th", {}, c)));
  const body = rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c))));
  return el("table", { id }, el("thead", {}, head), el("tbody", {}, ...body));
}

function show(section, ...nodes) {
  document.querySelector("#" + section + " .body").replaceChildren(...nodes);
}

function params() {
  return new URLSearchParams(location.hash.slice(1));
}

// The fragment with ``changes`` applied (a null value removes the parameter), as an href.
function hrefWith(changes) {
  const p = params();
  for (const [name, value] of Object.entries(changes)) {
    if (value === null || value === "") p.delete(name);
    else p.set(name, value);
  }
  return "#" + p;
}

function key() {
  return sessionStorage.getItem(KEY);
}

class Problem extends Error {}

async function api(path) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + key(), Accept: "application/json" } });
  const body = await r.json().catch(() => null);
  if (!r.ok) {
    const detail = body && body.detail ? body.detail : r.statusText;
    throw new Problem(r.status + " " + (body && body.title ? body.title : "") + ": " + detail);
  }
  return body;
}

async function guarded(section, fn) {
  try {
    await fn();
  } catch (e) {
    show(section, el("p", { class: "error" }, e instanceof Problem ? e.message : "request failed: " + e));
  }
}

function loadLag() {
  return guarded("lag-view", async () => {
    const lag = await api("/v1/lag?window_minutes=60");
    document.getElementById("tenant").textContent = "tenant " + lag.tenant;
    const states = Object.entries(lag.states).map(([s, n]) => s + " " + n).join(", ") || "none";
    show(
      "lag-view",
      el(
        "dl",
        { id: "lag" },
        el("dt", {}, "window"), el("dd", {}, lag.from + " → " + lag.to),
        el("dt", {}, "occurrences"), el("dd", {}, lag.occurrences + (lag.truncated ? " (more not counted)" : "")),
        el("dt", {}, "dispatched"), el("dd", {}, lag.dispatched),
        el("dt", {}, "lag p50 / p99 / max (s)"),
        el("dd", {}, [lag.lag_s.p50, lag.lag_s.p99, lag.lag_s.max].map((x) => (x === null ? "—" : x.toFixed(3))).join(" / ")),
        el("dt", {}, "states"), el("dd", {}, states),
      ),
      el("p", { class: "muted" }, "source: " + lag.source),
    );
  });
}

function loadSchedules() {
  return guarded("schedules-view", async () => {
    const p = params();
    const q = new URLSearchParams();
    for (const name of ["state", "handler", "cursor"]) {
      if (p.get(name)) q.set(name, p.get(name));
    }
    q.set("limit", p.get("limit") || "20");
    const page = await api("/v1/schedules?" + q);
    const rows = page.items.map((s) => [
      link({ schedule: s.schedule_id, occurrence: null }, s.schedule_id),
      stateCell(s.state), s.cron || s.at, s.timezone, s.handler, s.version,
    ]);
    const pages = [];
    if (p.get("cursor")) pages.push(link({ cursor: null }, "First page", "first-page"), " ");
    if (page.next_cursor) pages.push(link({ cursor: page.next_cursor }, "Next page", "next-page"));
    show(
      "schedules-view",
      rows.length ? table(["schedule", "state", "cron / at", "zone", "handler", "version"], rows, "schedules")
        : el("p", { class: "muted" }, "No schedules."),
      el("p", {}, ...pages),
    );
  });
}

function fillFilters() {
  const p = params();
  document.getElementById("f-state").value = p.get("state") || "";
  document.getElementById("f-handler").value = p.get("handler") || "";
  document.getElementById("f-limit").value = p.get("limit") || "20";
  document.getElementById("dlq-limit").value = p.get("dlq_limit") || "20";
}

function occurrenceRows(items) {
  return items.map((o) => [
    link({ schedule: o.schedule_id, occurrence: o.occurrence_id }, o.occurrence_id),
    o.version, o.scheduled_for, o.enqueued_at, o.lag_s, stateCell(o.state), o.attempt_count, o.reason,
  ]);
}

const OCC_COLUMNS = ["occurrence", "v", "scheduled_for", "enqueued_at", "lag s", "state", "attempts", "reason"];

function loadSchedule(sid) {
  if (!sid) return show("schedule-view", el("p", { class: "muted" }, "Pick a schedule."));
  return guarded("schedule-view", async () => {
    const s = await api("/v1/schedules/" + encodeURIComponent(sid) + "?next=10&last=20");
    const fires = s.next_fires.map((f) => [f.scheduled_for, f.available_at]);
    show(
      "schedule-view",
      el(
        "dl",
        { id: "schedule" },
        el("dt", {}, "schedule"), el("dd", {}, s.schedule_id),
        el("dt", {}, "state"), el("dd", {}, stateCell(s.state)),
        el("dt", {}, "version"), el("dd", {}, s.version),
        el("dt", {}, "cron / at"), el("dd", {}, (s.cron || s.at) + " in " + s.timezone),
        el("dt", {}, "handler"), el("dd", {}, s.handler),
      ),
      el("h3", {}, "Next runs"),
      fires.length ? table(["scheduled_for", "available_at"], fires, "next-runs") : el("p", { class: "muted" }, "None."),
      el("h3", {}, "Recent occurrences"),
      s.last_occurrences.length ? table(OCC_COLUMNS, occurrenceRows(s.last_occurrences), "recent")
        : el("p", { class: "muted" }, "None indexed yet."),
    );
  });
}

function loadOccurrence(oid) {
  if (!oid) return show("occurrence-view", el("p", { class: "muted" }, "Pick an occurrence."));
  return guarded("occurrence-view", async () => {
    const o = await api("/v1/occurrences/" + encodeURIComponent(oid));
    const attempts = o.attempts.map((a) => [
      a.attempt, a.worker_id, a.started_at, a.finished_at, a.result ? stateCell(a.result) : null,
      a.error_class, a.error_message,
    ]);
    show(
      "occurrence-view",
      table(OCC_COLUMNS, occurrenceRows([o]), "occurrence"),
      el("h3", {}, "Attempts"),
      attempts.length ? table(["attempt", "worker", "started", "finished", "result", "error", "message"], attempts, "attempts")
        : el("p", { class: "muted" }, "No attempt yet."),
    );
  });
}

// The DLQ's cursors only go forward, so the fragment's "dlq" holds the trail of cursors that led to
// the page shown ("|"-separated, none on the first page): "Previous page" drops the last of them.
function dlqTrail() {
  const trail = params().get("dlq");
  return trail ? trail.split("|") : [];
}

function dlqView() {
  const p = params();
  return (p.get("dlq") || "") + "/" + (p.get("dlq_limit") || "20");
}

let shownDlq = null;

function loadDlq() {
  shownDlq = dlqView();
  return guarded("dlq-view", async () => {
    const trail = dlqTrail();
    const q = new URLSearchParams({ limit: params().get("dlq_limit") || "20" });
    if (trail.length) q.set("cursor", trail[trail.length - 1]);
    const d = await api("/v1/dlq?" + q);
    const rows = d.items.map((x) => [
      link({ schedule: x.schedule_id, occurrence: x.occurrence_id }, x.occurrence_id),
      x.schedule_id, x.handler, x.scheduled_for, x.dead_at, x.attempts, x.reason, x.last_error_class, x.last_error_message,
    ]);
    const pages = [];
    if (trail.length) pages.push(link({ dlq: trail.slice(0, -1).join("|") }, "Previous page", "dlq-prev"), " ");
    if (d.next_cursor) pages.push(link({ dlq: [...trail, d.next_cursor].join("|") }, "Next page", "dlq-next"), " ");
    if (pages.length) pages.push(el("span", { class: "muted", id: "dlq-page" }, "page " + (trail.length + 1)));
    show(
      "dlq-view",
      rows.length ? table(["occurrence", "schedule", "handler", "scheduled_for", "dead_at", "attempts", "reason", "error", "message"], rows, "dlq")
        : el("p", { class: "muted" }, trail.length ? "No more dead letters." : "No dead letters."),
      el("p", {}, ...pages),
    );
  });
}

function loadSelection() {
  const p = params();
  return Promise.all([loadSchedule(p.get("schedule")), loadOccurrence(p.get("occurrence"))]);
}

async function loadAll() {
  document.body.dataset.ready = "0";
  document.getElementById("error").textContent = "";
  if (!key()) {
    document.getElementById("error").textContent = "Enter a tenant's API key (ksched tenants api-key create <tenant>).";
  } else {
    await Promise.all([loadLag(), loadSchedules(), loadDlq(), loadSelection()]);
  }
  document.body.dataset.ready = "1";
}

function takeKeyFromFragment() {
  const p = params();
  if (!p.has("key")) return;
  sessionStorage.setItem(KEY, p.get("key"));
  p.delete("key");
  history.replaceState(null, "", location.pathname + location.search + (p.toString() ? "#" + p : ""));
}

document.addEventListener("DOMContentLoaded", () => {
  takeKeyFromFragment();
  fillFilters();
  document.getElementById("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("key");
    sessionStorage.setItem(KEY, input.value.trim());
    input.value = "";
    loadAll();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    location.reload();
  });
  document.getElementById("filters").addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = hrefWith({
      state: document.getElementById("f-state").value,
      handler: document.getElementById("f-handler").value.trim(),
      limit: document.getElementById("f-limit").value,
      cursor: null,
    });
  });
  document.getElementById("dlq-filters").addEventListener("submit", (e) => {
    e.preventDefault();
    location.hash = hrefWith({ dlq_limit: document.getElementById("dlq-limit").value, dlq: null });
  });
  window.addEventListener("hashchange", () => {
    fillFilters();
    // a DLQ page is a read of the topic: only when its own part of the fragment changed
    Promise.all([loadSchedules(), loadSelection(), shownDlq === dlqView() ? null : loadDlq()]);
  });
  loadAll();
});
