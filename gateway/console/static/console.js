// ZoneGate console: plain JavaScript over the console's JSON API (gateway/console/routes.py).
// No framework: a few tables and a grid of zone cells, re-drawn in place every 2 s.
"use strict";

const POLL_MS = 2000;
const VIEWS = ["overview", "zones", "layout", "buckets"];
const $ = (sel) => document.querySelector(sel);
const state = { csrf: null, view: "overview", timer: null, lastCounters: null, rates: {},
                bucket: null, prefix: "", after: null, zoneSel: null };

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}
const num = (n) => (n === null || n === undefined) ? "–" : Math.round(n).toLocaleString("en");
const when = (t) => t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "–";

async function api(path, opts = {}) {
  const resp = await fetch("/console/api/" + path, {
    credentials: "same-origin", headers: { "Accept": "application/json", ...(opts.headers || {}) },
    ...opts,
  });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (resp.status === 401 && path !== "login") { showLogin(); throw new Error("logged out"); }
  if (!resp.ok) throw new Error((body && body.message) || `HTTP ${resp.status}`);
  return body;
}

function setStatus(text) { $("#status").textContent = text; }

// -- login -----------------------------------------------------------------------------------

function showLogin(message) {
  stopPolling();
  state.csrf = null;
  $("#login").hidden = false;
  $("#tabs").hidden = true;
  $("#who").hidden = true;
  for (const v of VIEWS) $("#view-" + v).hidden = true;
  if (message) $("#login-error").textContent = message;
  $("#access_key").focus();
}

function showApp(session) {
  state.csrf = session.csrf;
  $("#login").hidden = true;
  $("#tabs").hidden = false;
  $("#who").hidden = false;
  $("#who-name").textContent = session.user;
  $("#login-error").textContent = "";
  $("#secret_key").value = "";
  const fromHash = (location.hash || "").slice(1);
  selectView(VIEWS.includes(fromHash) ? fromHash : "overview", false);
  startPolling();
}

async function login(ev) {
  ev.preventDefault();
  const form = new URLSearchParams(new FormData($("#login-form")));
  $("#login-submit").disabled = true;
  try {
    const resp = await fetch("/console/api/login", {
      method: "POST", credentials: "same-origin", body: form,
      headers: { "Accept": "application/json" },
    });
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) { $("#login-error").textContent = body.message || `login failed (${resp.status})`; return; }
    showApp(body);
  } catch (e) {
    $("#login-error").textContent = "cannot reach the gateway";
  } finally {
    $("#login-submit").disabled = false;
  }
}

async function logout() {
  try {
    await api("logout", { method: "POST", headers: { "X-CSRF-Token": state.csrf || "" } });
  } catch (e) { /* shown as logged out anyway */ }
  showLogin("Logged out.");
}

// -- tabs and polling ------------------------------------------------------------------------

function selectView(view, focus = true) {
  state.view = view;
  for (const b of document.querySelectorAll("#tabs [role=tab]")) {
    const on = b.dataset.view === view;
    b.setAttribute("aria-selected", on ? "true" : "false");
    b.tabIndex = on ? 0 : -1;
    if (on && focus) b.focus();
  }
  for (const v of VIEWS) $("#view-" + v).hidden = v !== view;
  if (location.hash !== "#" + view) history.replaceState(null, "", "#" + view);
  if (view === "buckets") loadBuckets();
  refresh();
}

function tabKeys(ev) {
  const tabs = [...document.querySelectorAll("#tabs [role=tab]")];
  const i = tabs.indexOf(document.activeElement);
  if (i < 0) return;
  let j = null;
  if (ev.key === "ArrowRight") j = (i + 1) % tabs.length;
  else if (ev.key === "ArrowLeft") j = (i - 1 + tabs.length) % tabs.length;
  else if (ev.key === "Home") j = 0;
  else if (ev.key === "End") j = tabs.length - 1;
  if (j !== null) { ev.preventDefault(); selectView(tabs[j].dataset.view); }
}

function startPolling() {
  stopPolling();
  state.timer = setInterval(() => { if (!document.hidden) refresh(); }, POLL_MS);
}
function stopPolling() { if (state.timer) clearInterval(state.timer); state.timer = null; }

let refreshing = false;
async function refresh() {
  if (refreshing || !state.csrf) return;
  refreshing = true;
  try {
    if (state.view === "overview") renderOverview(await api("overview"));
    else if (state.view === "zones") renderZones(await api("zones"));
    else if (state.view === "layout") renderLayout(await api("layout"));
    setStatus("Updated " + new Date().toLocaleTimeString());
  } catch (e) {
    if (state.csrf) setStatus("Update failed: " + e.message);
  } finally {
    refreshing = false;
  }
}

// -- overview --------------------------------------------------------------------------------

function kv(pairs) {
  const dl = el("dl", { class: "kv" });
  for (const [k, v, cls] of pairs) dl.append(el("dt", { text: k }), el("dd", { text: v, class: cls }));
  return dl;
}

function updateRates(counters) {
  const prev = state.lastCounters;
  if (prev && counters.t > prev.t) {
    const dt = counters.t - prev.t;
    state.rates = {};
    for (const [op, c] of Object.entries(counters.operations)) {
      const p = prev.operations[op] || { total: 0, client_errors: 0, server_errors: 0 };
      state.rates[op] = { total: Math.max(0, c.total - p.total) / dt,
                          errors: Math.max(0, c.client_errors + c.server_errors - p.client_errors - p.server_errors) / dt };
    }
  }
  state.lastCounters = counters;
}

function renderOverview(doc) {
  const h = doc.health;
  const quorum = h.ok ? ["holds", "ok"] : (h.write_quorum ? ["reads at risk", "warn"] : ["LOST", "bad"]);
  $("#health").replaceChildren(
    el("div", { class: "big " + quorum[1], text: h.ok ? "Healthy" : (h.write_quorum ? "Degraded" : "Write quorum lost") }),
    kv([["Nodes up", `${h.nodes_up} of ${h.nodes}`, h.nodes_down.length ? "warn" : "ok"],
        ["Write quorum", `${h.write_quorum ? "holds" : "lost"} (needs ${h.write_quorum_needed})`, h.write_quorum ? "ok" : "bad"],
        ["Read quorum", h.read_quorum ? "holds" : "lost", h.read_quorum ? "ok" : "bad"],
        ["Erasure code", `${h.k}+${h.m}`],
        ["Down", h.nodes_down.join(", ") || "none", h.nodes_down.length ? "bad" : null]]));

  const c = doc.capacity;
  // total: what the parts add up to (the nodes' accounting); older nodes: the parts known
  const capTotal = c.total || ((c.live || 0) + (c.garbage || 0) + (c.stranded || 0) + (c.writable || 0) + (c.reserve || 0));
  // used: written (live or garbage) or stranded; the rest is writable, or held back as the
  // reserve reclaim and deletes write into
  const used = (c.live || 0) + (c.garbage || 0) + (c.stranded || 0);
  const pct = capTotal ? (100 * used / capTotal) : null;
  const parts = [["live", "live"], ["garbage", "garbage"], ["stranded", "stranded"], ["reserve", "reserve"]];
  const bar = el("div", { class: "bar", role: "img", id: "capacity-bar",
    "aria-label": `${pct === null ? "–" : pct.toFixed(1) + "%"} of ${bytes(capTotal)} used: live ${bytes(c.live)}, ` +
                  `garbage ${bytes(c.garbage)}, stranded ${bytes(c.stranded)}, reserve ${bytes(c.reserve)}; ` +
                  `${bytes(c.writable)} writable` });
  for (const [k, cls] of parts) {
    const s = el("span", { class: cls });
    s.style.width = capTotal ? `${100 * (c[k] || 0) / capTotal}%` : "0";
    bar.append(s);
  }
  const legend = el("div", { class: "legend-bar", "aria-hidden": "true" },
    ...[...parts, ["writable", "writable"]].map(([k, cls]) => el("span", {}, el("i", { class: cls }), k)));
  const zones = Object.entries(c.zones_by_condition).map(([k, v]) => `${k} ${v}`).join(", ");
  $("#capacity").replaceChildren(
    el("div", { class: "big", id: "capacity-used",
                text: `${bytes(used)} / ${bytes(capTotal)} used (${pct === null ? "–" : pct.toFixed(1) + "%"})` }),
    bar, legend,
    kv([["Writable", bytes(c.writable)], ["Live", bytes(c.live)], ["Garbage", bytes(c.garbage)],
        ["Stranded", bytes(c.stranded)], ["Reserve", bytes(c.reserve)],
        ["Records", num(c.records)],
        ["Write amplification", c.write_amplification ? c.write_amplification.toFixed(3) : "–"],
        ["Zones", zones || "–"],
        ["From", { node: "the nodes' space accounting", zones: "per-zone numbers",
                   stats: "node stats (approximate)" }[c.source] || c.source || "–"]]));

  const backlog = doc.repair.parts_awaiting_repair;
  $("#repair").replaceChildren(
    el("div", { class: "big " + (backlog ? "warn" : "ok"), text: backlog === null ? "unknown" : num(backlog) }),
    el("p", { text: backlog ? "parts await repair (run zonegate repair if this does not drain)" : "parts await repair" }));

  const rq = doc.requests;
  updateRates(rq);
  let total_rate = 0, err_rate = 0, total = 0, errors = 0;
  for (const [op, o] of Object.entries(rq.operations)) {
    total += o.total; errors += o.client_errors + o.server_errors;
    if (state.rates[op]) { total_rate += state.rates[op].total; err_rate += state.rates[op].errors; }
  }
  const ev = rq.events;
  $("#rates").replaceChildren(
    el("div", { class: "big", text: `${total_rate.toFixed(1)} req/s` }),
    kv([["Errors", `${err_rate.toFixed(1)}/s (${num(errors)} of ${num(total)})`, errors ? "warn" : null],
        ["In flight", num(rq.in_flight)],
        ["Node calls", Object.entries(rq.node_calls).map(([k, v]) => `${k} ${num(v)}`).join(", ") || "–"],
        ["Degraded reads / writes", `${num(ev.degraded_reads || 0)} / ${num(ev.degraded_writes || 0)}`],
        ["Failed-quorum writes", num(ev.failed_quorum_writes || 0), ev.failed_quorum_writes ? "bad" : null]]));

  const ops = $("#ops tbody");
  ops.replaceChildren(...Object.entries(rq.operations).map(([op, o]) => el("tr", {},
    el("th", { scope: "row", text: op }), el("td", { class: "num", text: num(o.total) }),
    el("td", { class: "num", text: state.rates[op] ? state.rates[op].total.toFixed(2) : "…" }),
    el("td", { class: "num", text: num(o.client_errors) }),
    el("td", { class: "num" + (o.server_errors ? " bad" : ""), text: num(o.server_errors) }))));

  $("#nodes tbody").replaceChildren(...nodeDriveRows(doc.nodes, (n, span) => [
    el("th", { scope: "row", rowspan: span, text: n.id, title: n.url }),
    el("td", { rowspan: span, class: n.up ? "ok" : "bad",
               text: n.up ? "up" : "down" + (n.error ? ` (${n.error.slice(0, 60)})` : "") })],
  (d) => {
    const z = Object.entries(d.zones_by_condition).map(([k, v]) => `${k} ${v}`).join(", ");
    return [el("td", { text: String(d.drive), title: d.path }),
            el("td", { class: "num", text: bytes(d.capacity.live) }),
            el("td", { class: "num", text: bytes(d.capacity.garbage) }),
            el("td", { class: "num", text: bytes(d.capacity.writable) }),
            el("td", { class: "num", text: num(d.records) }),
            el("td", { class: "num", text: d.write_amplification ? d.write_amplification.toFixed(2) : "–" }),
            el("td", { text: z })];
  }, 7));
}

// A table of nodes with a row per drive: the node's cells (spanning its drives' rows) open its
// first row; a node without drives gets one row of `blanks` dashes for the drive cells.
function nodeDriveRows(nodes, nodeCells, driveCells, blanks, rowAttrs = () => ({})) {
  const rows = [];
  for (const n of nodes) {
    const drives = n.drives.length ? n.drives : [null];
    drives.forEach((d, i) => {
      const cells = i === 0 ? nodeCells(n, drives.length) : [];
      if (d) cells.push(...driveCells(d));
      else for (let k = 0; k < blanks; k++) cells.push(el("td", { text: "–" }));
      rows.push(el("tr", rowAttrs(n, i), ...cells));
    });
  }
  return rows;
}

// -- zone map --------------------------------------------------------------------------------

function zoneLabel(node, d, z) {
  const pct = z.capacity ? Math.round(100 * z.written / z.capacity) : 0;
  let s = `${node} drive ${d.drive} zone ${z.index}: ${z.cond}, ${pct}% written`;
  if (z.written) s += `, ${bytes(z.live)} live, ${bytes(z.garbage)} garbage`;
  if (z.reclaiming) s += ", being reclaimed";
  return s;
}

function drawCell(cell, label, z) {
  cell.className = "cell " + z.cond + (z.reclaiming ? " reclaiming" : "");
  cell.setAttribute("aria-label", label);
  cell.title = label;
  cell.dataset.cond = z.cond;
  cell.dataset.written = z.written;
  cell.dataset.garbage = z.garbage;
  const fill = cell.firstChild, garbage = fill.firstChild;
  const share = (z.capacity && ["open", "closed", "full"].includes(z.cond)) ? Math.min(1, z.written / z.capacity) : 0;
  fill.style.height = `${(100 * share).toFixed(1)}%`;
  garbage.style.height = z.written ? `${(100 * Math.min(1, z.garbage / z.written)).toFixed(1)}%` : "0";
}

function renderZones(doc) {
  const root = $("#zonemap");
  const seen = new Set();
  for (const n of doc.nodes) {
    let box = document.getElementById("zn-" + n.id);
    if (!box) {
      box = el("section", { class: "node", id: "zn-" + n.id, "aria-label": "node " + n.id },
               el("p", { class: "note" }));
      root.append(box);
    }
    seen.add(box.id);
    const note = !n.up || n.error ? `${n.id} down: ${n.error || "unreachable"}`
      : (n.source === "stats" ? `${n.id}: approximate map (this node reports zone counts only)` : "");
    const noteEl = box.querySelector(".note");
    noteEl.textContent = note;
    noteEl.hidden = !note;
    noteEl.classList.toggle("bad", !n.up || !!n.error);
    for (const d of n.drives) {
      const did = `zd-${n.id}-${d.drive}`;
      let row = document.getElementById(did);
      if (!row || row.querySelectorAll(".cell").length !== d.zones.length) {
        if (row) row.remove();
        const grid = el("div", { class: "cells", role: "grid",
          "aria-label": `zones of ${n.id} drive ${d.drive}`, onkeydown: zoneKeys });
        const line = el("div", { role: "row" });
        line.style.display = "contents";  // the row must not break the wrapping flex layout
        grid.append(line);
        d.zones.forEach((z, i) => {
          const cell = el("span", { class: "cell", role: "gridcell", tabindex: i === 0 ? "0" : "-1",
            "data-node": n.id, "data-drive": d.drive, "data-index": z.index,
            onfocus: showZone, onclick: (ev) => ev.currentTarget.focus() },
            el("b", { class: "fill" }, el("b", { class: "garbage" })));
          line.append(cell);
        });
        row = el("div", { class: "drive", id: did },
                 el("div", { class: "label", text: `${n.id} · d${d.drive}`, title: d.path || "" }),
                 grid, el("div", { class: "sum" }));
        box.append(row);
      }
      const cap = d.capacity || {};
      row.querySelector(".sum").textContent =
        `live ${bytes(cap.live)} · garbage ${bytes(cap.garbage)} · writable ${bytes(cap.writable)}` +
        (cap.stranded ? ` · stranded ${bytes(cap.stranded)}` : "") +
        (cap.reserve ? ` · reserve ${bytes(cap.reserve)}` : "");  // empty zones held back
      const cells = row.querySelectorAll(".cell");
      d.zones.forEach((z, i) => {
        const label = zoneLabel(n.id, d, z);
        drawCell(cells[i], label, z);
        if (document.activeElement === cells[i]) $("#zone-detail").textContent = label;
      });
    }
  }
  for (const box of [...root.children]) if (!seen.has(box.id)) box.remove();
}

function showZone(ev) {
  const cell = ev.currentTarget;
  const grid = cell.closest("[role=grid]");
  for (const c of grid.querySelectorAll(".cell")) c.tabIndex = c === cell ? 0 : -1;
  $("#zone-detail").textContent = cell.getAttribute("aria-label");
}

function zoneKeys(ev) {
  const cell = ev.target.closest(".cell");
  if (!cell) return;
  const cells = [...ev.currentTarget.querySelectorAll(".cell")];
  const i = cells.indexOf(cell);
  // cells per visual row, from the layout
  let perRow = cells.findIndex((c) => c.offsetTop !== cells[0].offsetTop);
  if (perRow <= 0) perRow = cells.length;
  const moves = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: perRow, ArrowUp: -perRow };
  let j = null;
  if (ev.key in moves) j = i + moves[ev.key];
  else if (ev.key === "Home") j = 0;
  else if (ev.key === "End") j = cells.length - 1;
  if (j === null) return;
  ev.preventDefault();
  j = Math.max(0, Math.min(cells.length - 1, j));
  cells[j].focus();
}

// -- cluster layout --------------------------------------------------------------------------

const STATE_CLASS = { active: "ok", draining: "warn", gone: "bad", replaced: "warn", failed: "bad" };
const pct = (x) => `${x >= 0 ? "+" : ""}${(100 * x).toFixed(1)}%`;

function fillCell(f) {
  if (!f) return el("td", { class: "sub", text: "–" });
  const td = el("td", { title: `${num(f.held)} bytes of fragments held, share ${num(f.share)} bytes` });
  if (f.share > 0) {
    const ratio = f.held / f.share;
    const meter = el("span", { class: "meter" + (ratio > 1.05 ? " over" : ""), "aria-hidden": "true" }, el("span"));
    meter.firstChild.style.width = `${Math.min(100, 50 * ratio).toFixed(1)}%`;  // half = its share
    td.append(meter, `${bytes(f.held)} / ${bytes(f.share)} (${pct(f.deviation)})`);
  } else {
    td.append(`${bytes(f.held)} (takes no writes)`);
  }
  return td;
}

function movesCard(p) {
  if (!p) return [el("div", { class: "big", text: "unknown" }), el("p", { text: "the metadata store did not answer" })];
  if (p.phase === "none") return [el("div", { class: "big", text: "none yet" }), el("p", { text: "no mover run recorded" })];
  const bad = p.failed || p.stuck;
  const head = p.phase === "done" ? "done" : `${p.phase}, pass ${p.passes + 1}`;
  const pairs = [["Layout version", `v${p.version}${p.balance ? " (rebalance)" : ""}`]];
  if (p.phase !== "done") {
    pairs.push(["Left", `${bytes(p.bytes_left)} in ${num(p.parts_left)} parts`],
               ["Rate", `${bytes(p.rate)}/s`],
               ["ETA", p.eta_seconds === null || p.eta_seconds === undefined ? "–" : `${num(p.eta_seconds)} s`]);
  }
  pairs.push(["Moved", `${num(p.moves)} fragments (${num(p.rebuilt)} rebuilt), ${bytes(p.bytes_moved)}`],
             ["Failed / stuck", `${num(p.failed)} / ${num(p.stuck)}`, bad ? "bad" : null]);
  if (p.drive_records) pairs.push(["Off draining drives", `${num(p.drive_records)} records`]);
  if (p.swept) pairs.push(["Off draining nodes", `${num(p.swept)} records`]);
  if (p.balance) pairs.push(["Fill spread", pct(p.spread).replace("+", "")]);
  if (p.finished) pairs.push(["Finished", when(p.finished)]);
  if (p.requested_pending) pairs.push(["Rebalance", "requested, not started yet", "warn"]);
  return [el("div", { class: "big " + (bad ? "bad" : (p.active ? "warn" : "ok")), id: "moves-phase", text: head }), kv(pairs)];
}

function renderLayout(doc) {
  const L = doc.layout;
  const counts = {};
  for (const n of doc.nodes) counts[n.state] = (counts[n.state] || 0) + 1;
  $("#layout-summary").replaceChildren(
    el("div", { class: "big", id: "layout-version", text: `v${L.version}` }),
    kv([["Note", L.note || "–"], ["Applied", when(L.applied_at)], ["Erasure code", `${L.k}+${L.m}`],
        ["Nodes", Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ")],
        ["Fill spread", doc.fill ? `${(100 * doc.fill.spread).toFixed(1)}% (balanced within ${(100 * doc.fill.tolerance).toFixed(0)}%)` : "– (no tally yet)",
         doc.fill && doc.fill.spread > doc.fill.tolerance ? "warn" : null]]));
  $("#moves").replaceChildren(...movesCard(doc.moves));
  const staged = doc.staged;
  $("#staged").replaceChildren(
    el("div", { class: "big", text: staged === null ? "unknown" : String(staged.length) }),
    staged && staged.length
      ? el("ol", { class: "staged" }, ...staged.map((c) => el("li", { text: c.text })))
      : el("p", { text: staged === null ? "the layout store did not answer" : "nothing staged (zonegate layout … stages, zonegate layout apply applies)" }));
  $("#layout-problems").replaceChildren(...doc.problems.map((p) => el("li", { text: p })));

  $("#layout-nodes tbody").replaceChildren(...nodeDriveRows(doc.nodes, (n, span) => {
    const reach = n.up === null ? ["–", "sub"] : (n.up ? ["up", "ok"] : ["down" + (n.error ? ` (${n.error.slice(0, 50)})` : ""), "bad"]);
    const f = fillCell(n.fill);
    f.rowSpan = span;
    return [el("th", { scope: "row", rowspan: span, text: n.id, title: n.url }),
            el("td", { rowspan: span, text: n.domain }),
            el("td", { rowspan: span, class: "num", text: String(n.weight) }),
            el("td", { rowspan: span }, el("span", { class: "pill " + (STATE_CLASS[n.state] || ""), text: n.state })),
            el("td", { rowspan: span, class: reach[1], text: reach[0] }),
            f];
  }, (d) => {
    const zones = d.seq_zones ? `${num(d.empty_zones)} of ${num(d.seq_zones)}` : "–";
    const flags = [d.failed ? "failed" : null, d.replaced ? "new in a used slot" : null,
                   d.present === false ? "missing" : null].filter(Boolean).join(", ");
    return [el("td", { title: d.path, text: d.path.split("/").slice(-2).join("/") }),
            el("td", {}, el("span", { class: "pill " + (STATE_CLASS[d.state] || ""), text: d.state }),
               flags ? el("span", { class: "bad", text: " " + flags }) : null),
            el("td", { class: "num", text: num(d.records) }),
            el("td", { class: d.state === "draining" && d.seq_zones && d.empty_zones === d.seq_zones ? "ok" : null, text: zones })];
  }, 4, (n, i) => ({ "data-node": i === 0 ? n.id : null })));
}

// -- bucket browser --------------------------------------------------------------------------

async function loadBuckets() {
  try {
    const doc = await api("buckets");
    const list = $("#bucket-list");
    list.replaceChildren(...doc.buckets.map((b) => el("li", {}, el("button", {
      type: "button", text: b.name, title: `created ${when(b.created)}, ${b.region}`,
      "aria-current": b.name === state.bucket ? "true" : "false",
      onclick: () => openBucket(b.name, "") }))));
    if (!doc.buckets.length) list.append(el("li", {}, el("p", { class: "linkish", text: "No buckets yet." })));
  } catch (e) { setStatus("Buckets: " + e.message); }
}

function openBucket(name, prefix) {
  state.bucket = name;
  state.prefix = prefix;
  $("#prefix").value = prefix;
  for (const b of document.querySelectorAll("#bucket-list button"))
    b.setAttribute("aria-current", b.textContent === name ? "true" : "false");
  $("#object").replaceChildren();
  listObjects(false);
}

async function listObjects(more) {
  if (!state.bucket) return;
  const q = new URLSearchParams({ bucket: state.bucket, prefix: state.prefix,
                                  delimiter: $("#delim").checked ? "/" : "" });
  if (more && state.after) q.set("after", state.after);
  try {
    const doc = await api("objects?" + q);
    $("#objects-title").textContent = `Objects in ${state.bucket}`;
    renderCrumbs();
    const body = $("#objects tbody");
    const rows = [
      ...doc.prefixes.map((p) => el("tr", {}, el("td", {}, el("button", { type: "button", class: "linkish",
        text: p.slice(state.prefix.length) || p, onclick: () => openBucket(state.bucket, p) })),
        el("td", { text: "folder" }), el("td", { text: "" }))),
      ...doc.objects.map((o) => el("tr", {}, el("td", {}, el("button", { type: "button", class: "linkish",
        text: o.key.slice(state.prefix.length) || o.key, onclick: () => showObject(o.key) })),
        el("td", { class: "num", text: bytes(o.size) }), el("td", { text: when(o.last_modified) }))),
    ];
    if (more) body.append(...rows); else body.replaceChildren(...rows);
    if (!more && !rows.length) body.append(el("tr", {}, el("td", { colspan: 3, text: "Nothing here." })));
    state.after = doc.next;
    $("#more").hidden = !doc.truncated;
  } catch (e) { setStatus("Objects: " + e.message); }
}

function renderCrumbs() {
  const parts = state.prefix.split("/").filter(Boolean);
  const crumbs = [el("button", { type: "button", class: "linkish", text: state.bucket,
                                 onclick: () => openBucket(state.bucket, "") })];
  let acc = "";
  for (const p of parts) {
    acc += p + "/";
    const target = acc;
    crumbs.push(" / ", el("button", { type: "button", class: "linkish", text: p,
                                      onclick: () => openBucket(state.bucket, target) }));
  }
  $("#crumbs").replaceChildren(...crumbs);
}

async function showObject(key) {
  const box = $("#object");
  try {
    const o = await api("object?" + new URLSearchParams({ bucket: state.bucket, key }));
    const pairs = [["Key", o.key], ["Size", `${bytes(o.size)} (${num(o.size)} bytes)`], ["ETag", o.etag],
                   ["Last modified", when(o.last_modified)], ["Owner", o.owner],
                   ["Content-Type", o.headers["Content-Type"] || o.headers["content-type"] || "–"],
                   ["Parts", `${o.parts.length}${o.multipart ? " (multipart)" : ""}`]];
    if (o.checksum && o.checksum.algorithm) pairs.push(["Checksum", `${o.checksum.algorithm} ${o.checksum.value}`]);
    for (const [k, v] of Object.entries(o.user_meta)) pairs.push([`x-amz-meta-${k}`, v]);
    const first = o.parts[0];
    if (first) pairs.push(["Fragments", `${first.scheme} on ${first.nodes.join(", ")}` +
                           (first.missing.length ? ` (missing ${first.missing.join(", ")})` : "")]);
    const dl = el("button", { type: "button", id: "download", text: "Download", class: "button",
                              onclick: () => download(o.key) });
    box.replaceChildren(el("h3", { text: o.key }), kv(pairs), dl);
    dl.focus();
  } catch (e) { box.textContent = "Object: " + e.message; }
}

async function download(key) {
  try {
    const doc = await api("presign?" + new URLSearchParams({ bucket: state.bucket, key }));
    const a = el("a", { href: doc.url, id: "download-link", class: "button", text: "Download link (valid 5 minutes)" });
    const old = document.getElementById("download-link");
    if (old) old.replaceWith(a); else $("#object").append(" ", a);
    a.click();
  } catch (e) { setStatus("Download: " + e.message); }
}

// -- start -----------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", async () => {
  $("#login-form").addEventListener("submit", login);
  $("#logout").addEventListener("click", logout);
  $("#tabs").addEventListener("keydown", tabKeys);
  for (const b of document.querySelectorAll("#tabs [role=tab]"))
    b.addEventListener("click", () => selectView(b.dataset.view, false));
  $("#list-form").addEventListener("submit", (ev) => {
    ev.preventDefault(); state.prefix = $("#prefix").value; listObjects(false);
  });
  $("#delim").addEventListener("change", () => listObjects(false));
  $("#more").addEventListener("click", () => listObjects(true));
  const failed = new URLSearchParams(location.search).get("login") === "failed";
  try {
    const resp = await fetch("/console/api/session", { credentials: "same-origin", headers: { "Accept": "application/json" } });
    if (resp.ok) { showApp(await resp.json()); return; }
  } catch (e) { /* fall through to the login form */ }
  showLogin(failed ? "Access key or secret key is wrong." : "");
});
