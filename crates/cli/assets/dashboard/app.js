// berth operator dashboard: vanilla JS, SVG drawn by hand, no build step.
// Reads the JSON endpoints under /dashboard/api (docs/DASHBOARD.md) and the
// reservation API's /availability for the earliest-slot finder.
"use strict";

const state = { token: null, session: null, mode: null, timer: null, range: "week", calendar: null, activityPrev: null };
const $ = (sel) => document.querySelector(sel);
const view = () => $("#view");

function el(tag, attrs, ...children) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

async function api(path) {
  const r = await fetch(path, { headers: { "X-Auth-Token": state.token, "Accept": "application/json" } });
  if (r.status === 401) { showLogin("That token was not accepted."); throw new Error("unauthorized"); }
  const body = await r.json();
  if (!r.ok) throw new Error((body.error && body.error.message) || (body.error_message) || r.statusText);
  return body;
}

function fmtDate(sec) { return new Date(sec * 1000).toISOString().replace("T", " ").slice(0, 16) + "Z"; }
function pct(used, total) { return total > 0 ? used / total : 0; }
function heat(f) {
  // green (0) → amber → red (1)
  const h = Math.round(120 * (1 - Math.min(1, Math.max(0, f))));
  return `hsl(${h}, 65%, 48%)`;
}
function meter(used, limit) {
  const f = limit > 0 ? Math.min(1, used / limit) : 0;
  const bar = el("div", { style: `width:${(f * 100).toFixed(1)}%`, class: f >= 1 ? "full" : f > 0.8 ? "high" : "" });
  return el("span", { class: "meter" }, bar);
}
function tooltip(evt, text) {
  const t = $("#tooltip");
  if (!text) { t.hidden = true; return; }
  t.textContent = text; t.hidden = false;
  t.style.left = (evt.clientX + 12) + "px"; t.style.top = (evt.clientY + 12) + "px";
}

// ---------------------------------------------------------------- login

function showLogin(message) {
  $("#login").hidden = false;
  view().replaceChildren();
  $("#login-error").textContent = message || "";
  $("#auth-mode").textContent = state.mode || "";
  $("#login-password").hidden = state.mode !== "keystone";
}

async function start() {
  state.mode = (await (await fetch("/dashboard/api/config")).json()).auth_mode;
  state.token = localStorage.getItem("berthToken") || (state.mode === "noauth2" ? "admin" : null);
  $("#login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    let token = $("#login-token").value.trim();
    if (!token && state.mode === "keystone" && $("#login-user").value) {
      const r = await fetch("/dashboard/api/login", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ user: $("#login-user").value, password: $("#login-pass").value,
          project: $("#login-project").value, domain: $("#login-domain").value || "Default" }) });
      const body = await r.json();
      if (!r.ok) { $("#login-error").textContent = body.error ? body.error.message : r.statusText; return; }
      token = body.token;
    }
    if (!token) return;
    state.token = token;
    localStorage.setItem("berthToken", token);
    await enter();
  });
  $("#logout").addEventListener("click", () => {
    localStorage.removeItem("berthToken");
    state.token = null; state.session = null;
    $("#logout").hidden = true; $("#whoami").textContent = "";
    showLogin();
  });
  window.addEventListener("hashchange", route);
  if (!state.token) { showLogin(); return; }
  await enter();
}

async function enter() {
  try { state.session = await api("/dashboard/api/session"); state.sessionAt = Date.now(); } catch (e) { return; }
  $("#login").hidden = true;
  $("#logout").hidden = false;
  const s = state.session;
  $("#whoami").textContent = `${s.user} · project ${s.project}${s.admin ? " · admin" : ""}`;
  document.body.dataset.admin = s.admin ? "true" : "false";
  await route();
}

async function route() {
  if (!state.session) return;
  if (state.timer) { clearInterval(state.timer); state.timer = null; }
  $("#tooltip").hidden = true;
  let name = (location.hash || "").slice(1);
  const adminViews = ["capacity", "flavors", "activity"];
  if (!name) name = state.session.admin ? "capacity" : "calendar";
  if (!state.session.admin && adminViews.includes(name)) name = "calendar";
  for (const a of document.querySelectorAll("#tabs a")) {
    a.classList.toggle("active", a.dataset.view === name);
    a.hidden = !state.session.admin && adminViews.includes(a.dataset.view);
  }
  view().replaceChildren(el("p", { text: "Loading…" }));
  view().dataset.view = name;
  view().dataset.ready = "false";
  const t0 = performance.now();
  try {
    await VIEWS[name]();
    view().dataset.ready = "true";
    view().dataset.renderMs = String(Math.round(performance.now() - t0));
  } catch (e) {
    if (e.message !== "unauthorized") view().replaceChildren(el("p", { class: "error", text: e.message }));
  }
}

// ---------------------------------------------------------------- capacity

let capacityClass = "VCPU";
let capacityGroup = "cell";

async function viewCapacity() {
  const data = await api("/dashboard/api/capacity");
  const root = el("div");
  const totals = data.totals;
  const summary = el("p", { class: "summary" },
    "Hosts: ", el("b", { id: "host-count", text: String(data.hosts.length) }),
    ...["VCPU", "MEMORY_MB", "DISK_GB"].filter((c) => totals[c]).map((c) =>
      el("span", {}, ` · ${c} ${totals[c].used} / ${totals[c].total}`)));
  const classSel = el("select", { id: "capacity-class", onchange: (e) => { capacityClass = e.target.value; draw(); } },
    ...["VCPU", "MEMORY_MB", "DISK_GB"].map((c) => el("option", { value: c, selected: c === capacityClass ? "" : null, text: c })));
  const groupSel = el("select", { id: "capacity-group", onchange: (e) => { capacityGroup = e.target.value; draw(); } },
    ...[["cell", "cell"], ["availability_zone", "availability zone"], ["aggregate", "aggregate"]].map(([v, t]) =>
      el("option", { value: v, selected: v === capacityGroup ? "" : null, text: t })));
  const legend = el("p", { class: "legend" },
    el("span", {}, el("i", { style: `background:${heat(0)}` }), "empty"),
    el("span", {}, el("i", { style: `background:${heat(1)}` }), "full"),
    el("span", {}, el("i", { style: "outline:2px solid #555" }), "disabled"),
    el("span", {}, el("i", { style: "background:repeating-linear-gradient(45deg,#ccc 0 3px,#555 3px 5px)" }), "down"),
    el("span", {}, el("i", { style: "border:3px solid #7b3fe4;box-sizing:border-box" }), "reservation pool"),
    el("span", {}, el("i", { style: "border:3px dashed #0a8f8f;box-sizing:border-box" }), "pool host lent"),
    el("span", {}, el("i", { class: "mark-power-off" }), "powered off / switching"),
    el("span", {}, el("i", { class: "mark-power-failed" }), "power-on failed"));
  const pool = data.hosts.filter((h) => h.pool_state);
  const poolCount = (k, v) => pool.filter((h) => h[k] === v).length;
  const poolSummary = pool.length ? el("p", { class: "hint", id: "pool-summary" },
    `Pool: ${pool.length} hosts · ` + ["free", "reserved", "lent", "reclaimed", "recycling"].map((s) => `${s} ${poolCount("pool_state", s)}`).join(" · ") +
    " · power " + ["on", "off", "powering-on", "powering-off", "failed"].map((s) => `${s} ${poolCount("power", s)}`).join(" · ")) : null;
  // One set of listeners for all the squares (thousands of hosts).
  const byUuid = new Map(data.hosts.map((h) => [h.uuid, h]));
  const hostOf = (e) => { const c = e.target.closest(".cell"); return c ? byUuid.get(c.dataset.uuid) : null; };
  const tipOf = (h) => {
    const r = h.resources[capacityClass] || { used: 0, total: 0 };
    return `${h.host} (${h.node})\n${capacityClass} ${r.used} / ${r.total}` +
      `${h.up ? "" : "\ndown"}${h.disabled ? "\ndisabled" : ""}` +
      `${h.reserved ? `\nreservation pool: ${h.pool_state}\npower: ${h.power}` : ""}`;
  };
  const groups = el("div", { id: "capacity-groups",
    onmousemove: (e) => { const h = hostOf(e); tooltip(e, h ? tipOf(h) : null); },
    onmouseleave: (e) => tooltip(e, null),
    onclick: (e) => { const h = hostOf(e); if (h) showHost(h.uuid); } });
  const detail = el("div", { id: "host-detail", hidden: "" });
  root.append(el("h2", { text: "Capacity" }), summary,
    el("div", { class: "controls" }, el("label", {}, "Colour by ", classSel), el("label", {}, "Group by ", groupSel)),
    legend, poolSummary, groups, detail);
  view().replaceChildren(root);

  function draw() {
    const byGroup = new Map();
    for (const h of data.hosts) {
      const keys = capacityGroup === "cell" ? [h.cell || "(none)"]
        : capacityGroup === "availability_zone" ? [h.availability_zone]
        : (h.aggregates.length ? h.aggregates : ["(no aggregate)"]);
      for (const k of keys) { if (!byGroup.has(k)) byGroup.set(k, []); byGroup.get(k).push(h); }
    }
    groups.replaceChildren();
    for (const [name, hosts] of [...byGroup.entries()].sort()) {
      const cells = el("div", { class: "cells" });
      for (const h of hosts) {
        const r = h.resources[capacityClass] || { used: 0, total: 0 };
        const power = h.power && h.power !== "on" ? (h.power === "failed" ? "power-failed" : "power-off") : "";
        const cls = ["cell", h.disabled ? "disabled" : "", h.up ? "" : "down", h.reserved ? "reserved" : "",
          h.pool_state === "lent" ? "lent" : "", power].join(" ");
        cells.append(el("div", {
          class: cls, style: `background-color:${heat(pct(r.used, r.total))}`,
          "data-host": h.host, "data-uuid": h.uuid, "data-used": r.used, "data-total": r.total,
          "data-pool-state": h.pool_state, "data-power": h.power,
        }));
      }
      groups.append(el("div", { class: "group" }, el("h3", { text: `${name} (${hosts.length})` }), cells));
    }
  }
  draw();

  async function showHost(uuid) {
    const d = await api(`/dashboard/api/hosts/${uuid}`);
    detail.hidden = false;
    const provs = el("table", {}, el("tr", {}, ...["provider", "class", "used", "capacity", "total", "reserved", "ratio"].map((t) => el("th", { text: t }))));
    for (const p of d.providers) {
      for (const [cls, inv] of Object.entries(p.inventories)) {
        provs.append(el("tr", { "data-class": cls },
          el("td", { text: p.name }), el("td", { text: cls }),
          el("td", { class: "num used", text: String(inv.used) }), el("td", { class: "num", text: String(inv.capacity) }),
          el("td", { class: "num", text: String(inv.total) }), el("td", { class: "num", text: String(inv.reserved) }),
          el("td", { class: "num", text: String(inv.allocation_ratio) })));
      }
    }
    const allocs = el("table", { id: "host-allocations" }, el("tr", {}, ...["consumer", "project", "server", "resources"].map((t) => el("th", { text: t }))));
    for (const a of d.allocations) {
      allocs.append(el("tr", {}, el("td", { text: a.consumer }), el("td", { text: a.project }),
        el("td", { text: a.server ? "yes" : "" }),
        el("td", { text: Object.entries(a.resources).map(([k, v]) => `${k}=${v}`).join(", ") })));
    }
    const traits = d.providers.flatMap((p) => p.traits);
    const pool = d.pool ? el("p", { id: "host-pool" }, "Reservation pool: ",
      el("b", { id: "host-pool-state", text: d.pool.pool_state }), " · power ", el("b", { id: "host-power", text: d.pool.power }),
      ` (since ${fmtDate(d.pool.power_since)})`, d.pool.reservable ? "" : " · not reservable",
      d.pool.next_needed ? ` · next needed by a lease ${fmtDate(d.pool.next_needed)}` : " · no lease ahead")
      : el("p", { class: "hint", id: "host-pool", text: "Not in the reservation pool." });
    detail.replaceChildren(el("h3", { id: "host-detail-name", text: `${d.host} · ${d.node} · cell ${d.cell || ""}` }), pool,
      el("h4", { text: "Inventories" }), provs,
      el("p", { class: "hint", text: `Traits: ${traits.join(", ") || "none"}` }),
      el("h4", { text: `Allocations (${d.allocations.length})` }), allocs);
    detail.dataset.uuid = uuid;
  }
}

// ---------------------------------------------------------------- flavors

let flavorsAhead = 0;
let flavorsGroup = "availability_zone";

function serverNow() {
  return state.session.now + Math.floor((Date.now() - state.sessionAt) / 1000);
}

async function viewFlavors() {
  const at = flavorsAhead > 0 ? serverNow() + Math.round(flavorsAhead * 3600) : null;
  const data = await api(`/dashboard/api/flavors${at === null ? "" : `?at=${at}`}`);
  const byKey = flavorsGroup === "aggregate" ? "by_aggregate" : "by_zone";
  const groups = [...new Set(data.flavors.flatMap((f) => Object.keys(f[byKey])))].sort();
  const max = Math.max(1, ...data.flavors.map((f) => f.free));
  const when = data.at === data.now ? "now" : `at ${fmtDate(data.at)}`;
  const table = el("table", { id: "flavor-table", "data-at": data.at },
    el("tr", {}, el("th", { text: "flavor" }), el("th", { class: "num", text: "vCPU" }), el("th", { class: "num", text: "RAM MiB" }),
      el("th", { class: "num", text: "disk GiB" }), el("th", { text: "extra specs" }), el("th", { class: "num", text: `fit ${when}` }), el("th", { text: "" }),
      el("th", { class: "num", text: "hosts with room" }), el("th", { class: "num", text: "pool: free for leases" }),
      ...groups.map((g) => el("th", { class: "num", text: `${flavorsGroup === "aggregate" ? "" : "AZ "}${g}` }))));
  for (const f of data.flavors) {
    const n = f.needs;
    const specs = [...Object.entries(n.resources).filter(([c]) => !["VCPU", "MEMORY_MB", "DISK_GB"].includes(c)).map(([c, v]) => `${c}=${v}`),
      ...n.required.map((t) => `+${t}`), ...n.forbidden.map((t) => `!${t}`)];
    table.append(el("tr", { "data-flavor": f.flavor },
      el("td", { text: f.flavor }), el("td", { class: "num", text: String(f.vcpus) }), el("td", { class: "num", text: String(f.ram) }),
      el("td", { class: "num", text: String(f.disk) }), el("td", { class: "specs", text: specs.join(" ") }),
      el("td", { class: "num free", text: String(f.free) }),
      el("td", {}, el("span", { class: "bar", style: `width:${Math.round(200 * f.free / max)}px` })),
      el("td", { class: "num", text: String(f.hosts_with_room) }),
      el("td", { class: "num pool-free", text: String(f.pool_free) }),
      ...groups.map((g) => el("td", { class: "num", "data-group": g, text: String(f[byKey][g] || 0) }))));
  }
  const ahead = el("select", { id: "flavors-ahead", onchange: (e) => { flavorsAhead = Number(e.target.value); route(); } },
    ...[[0, "now"], [1, "in 1 hour"], [3, "in 3 hours"], [6, "in 6 hours"], [24, "in 1 day"], [72, "in 3 days"], [168, "in 1 week"], [720, "in 30 days"]]
      .map(([h, t]) => el("option", { value: String(h), selected: h === flavorsAhead ? "" : null, text: t })));
  const groupSel = el("select", { id: "flavors-group", onchange: (e) => { flavorsGroup = e.target.value; route(); } },
    ...[["availability_zone", "availability zone"], ["aggregate", "aggregate"]].map(([v, t]) =>
      el("option", { value: v, selected: v === flavorsGroup ? "" : null, text: t })));
  const resv = el("table", { id: "reservation-flavors" },
    el("tr", {}, ...["reservation flavor", "lease", "project", "window", "slots", "vCPU", "RAM MiB", "disk GiB"].map((t) => el("th", { text: t }))));
  for (const r of data.reservation_flavors) {
    resv.append(el("tr", { "data-reservation": r.reservation }, el("td", { text: r.flavor }), el("td", { text: r.lease_name }),
      el("td", { text: r.project }), el("td", { text: `${fmtDate(r.start)} → ${fmtDate(r.end)}` }),
      el("td", { class: "num", text: String(r.slots) }), el("td", { class: "num", text: String(r.vcpus) }),
      el("td", { class: "num", text: String(r.ram) }), el("td", { class: "num", text: String(r.disk) })));
  }
  view().replaceChildren(el("h2", { text: "Free capacity by flavor" }),
    el("div", { class: "controls" }, el("label", {}, "When ", ahead), el("label", {}, "Per ", groupSel),
      el("span", { class: "hint", id: "flavors-when", text: `${when}${data.lending ? " · pool lending on" : ""}` })),
    el("p", { class: "hint", text: "Fit: how many more servers of each flavor general scheduling can place (hosts up and enabled, outside the reservation pool or lent from it), honouring the flavor's resources/trait extra specs. Pool: how many a new lease could reserve on pool hosts no lease holds then. At a future time, hosts booked by leases live then are taken, and hosts whose leases have ended are counted empty." }),
    data.flavors.length ? table : el("p", { text: "No flavors." }),
    el("h3", { text: `Reservation flavors (instance reservations live ${when}): their slots belong to the lease` }),
    data.reservation_flavors.length ? resv : el("p", { class: "hint", text: "None." }));
}

// ---------------------------------------------------------------- lease calendar

const RANGES = { day: 86400, week: 7 * 86400, month: 30 * 86400 };

async function viewCalendar() {
  const now = Math.floor(Date.now() / 1000);
  const span = RANGES[state.range];
  const startT = (state.session.now || now) - Math.round(span / 7);
  const endT = startT + span;
  const data = await api(`/dashboard/api/leases?start=${startT}&end=${endT}`);
  state.calendar = data;
  const root = el("div");
  const zoom = el("span", {}, ...Object.keys(RANGES).map((r) => el("button", {
    type: "button", id: `zoom-${r}`, disabled: r === state.range ? "" : null,
    onclick: () => { state.range = r; route(); } , text: r })));
  const filter = el("input", { id: "calendar-filter", placeholder: "filter by project or lease", oninput: () => draw() });
  const aggregates = [...new Set(data.hosts.flatMap((h) => h.aggregates || []))].sort();
  const aggregateSel = el("select", { id: "calendar-aggregate", onchange: () => draw() },
    el("option", { value: "", text: "all aggregates" }), ...aggregates.map((a) => el("option", { value: a, text: a })));
  const traitSel = el("select", { id: "calendar-trait", onchange: () => draw() },
    el("option", { value: "", text: "any trait" }),
    ...(data.traits || []).map((t, i) => [t, i]).sort().map(([t, i]) => el("option", { value: String(i), text: t })));
  const finder = el("form", { id: "finder", onsubmit: (e) => { e.preventDefault(); findSlot(); } },
    el("fieldset", {}, el("legend", { text: "Earliest free slot" }),
      el("label", {}, "type ", el("select", { id: "finder-type" },
        el("option", { value: "physical:host", text: "hosts" }), el("option", { value: "virtual:instance", text: "instances" }))),
      el("label", {}, " hours ", el("input", { id: "finder-hours", type: "number", min: "1", value: "24", size: "4" })),
      el("label", {}, " hosts ", el("input", { id: "finder-count", type: "number", min: "1", value: "1", size: "3" })),
      el("label", {}, " vCPU ", el("input", { id: "finder-vcpus", type: "number", min: "1", value: "1", size: "3" })),
      el("label", {}, " RAM MiB ", el("input", { id: "finder-ram", type: "number", min: "1", value: "512", size: "6" })),
      el("label", {}, " disk GiB ", el("input", { id: "finder-disk", type: "number", min: "0", value: "1", size: "3" })),
      " ", el("button", { type: "submit", text: "Find" }),
      el("span", { id: "finder-result" })));
  const svgBox = el("div", { id: "gantt" });
  root.append(el("h2", { text: "Lease calendar" }),
    el("div", { class: "controls" }, zoom, filter, aggregateSel, traitSel,
      el("span", { class: "hint", text: `${fmtDate(startT)} → ${fmtDate(endT)} · ${data.bars.length} bars on ${data.hosts.length} hosts` })),
    state.session.admin ? finder : el("span"), svgBox);
  view().replaceChildren(root);

  const labelW = 150, width = 1000, rowH = 18, top = 24;
  const x = (t) => labelW + (Math.min(Math.max(t, startT), endT) - startT) * (width - labelW) / (endT - startT);
  let slotDraw = null;

  function draw() {
    const q = filter.value.trim().toLowerCase();
    const bars = data.bars.filter((b) => !q || b.project.toLowerCase().includes(q) || (b.name || "").toLowerCase().includes(q) || b.lease.includes(q));
    const agg = aggregateSel.value, trait = traitSel.value;
    const hosts = data.hosts.filter((h) => (!agg || (h.aggregates || []).includes(agg)) &&
      (trait === "" || (h.traits || []).includes(Number(trait))));
    const rowOf = new Map(hosts.map((h, i) => [h.id, i]));
    const height = top + Math.max(1, hosts.length) * rowH + 4;
    const svg = el("svg:svg", { width, height, id: "gantt-svg", "data-start": startT, "data-end": endT,
      "data-x0": labelW, "data-width": width - labelW });
    // time axis
    const ticks = state.range === "day" ? 6 : state.range === "week" ? 7 : 10;
    for (let i = 0; i <= ticks; i++) {
      const t = startT + i * (endT - startT) / ticks;
      svg.append(el("svg:line", { x1: x(t), x2: x(t), y1: top - 4, y2: height, stroke: "#dde" }));
      svg.append(el("svg:text", { x: x(t) + 2, y: 12 }, fmtDate(t).slice(5, state.range === "day" ? 16 : 10)));
    }
    const nextStart = new Map();
    for (const b of data.bars) {
      if (b.end > data.now && (!nextStart.has(b.host) || b.start < nextStart.get(b.host))) nextStart.set(b.host, b.start);
    }
    hosts.forEach((h, i) => {
      if (h.pool_state === "lent") {
        // Lent to general scheduling from now until a lease needs it.
        const until = Math.max(data.now, nextStart.get(h.id) || endT);
        svg.append(el("svg:rect", { class: "lent-band", x: x(data.now), y: top + i * rowH + 1, width: Math.max(1, x(until) - x(data.now)),
          height: rowH - 2, "data-host": h.id, onmousemove: (e) => tooltip(e, `${h.name}: lent to general scheduling`),
          onmouseleave: (e) => tooltip(e, null) }));
      }
      const marks = (h.power && h.power !== "on" ? ` ⏻${h.power}` : "") + (h.pool_state === "lent" ? " ⇄" : "");
      svg.append(el("svg:text", { x: 4, y: top + i * rowH + 13, "data-row": h.id, "data-pool-state": h.pool_state, "data-power": h.power,
        class: h.power && h.power !== "on" ? `power-${h.power === "failed" ? "failed" : "off"}` : null }, h.name + marks));
      svg.append(el("svg:line", { x1: labelW, x2: width, y1: top + (i + 1) * rowH, y2: top + (i + 1) * rowH, stroke: "#eef" }));
    });
    const colors = new Map();
    for (const b of bars) {
      const row = rowOf.get(b.host);
      if (row === undefined) continue;
      if (!colors.has(b.lease)) colors.set(b.lease, `hsl(${(colors.size * 67) % 360}, 60%, 60%)`);
      const x1 = x(b.start), x2 = x(b.end);
      const tip = `${b.name} (${b.status})\nproject ${b.project}\n${b.type}${b.slots > 1 ? ` × ${b.slots} slots` : ""}\n${fmtDate(b.start)} → ${fmtDate(b.end)}`;
      svg.append(el("svg:rect", { class: "gantt-bar", x: x1, y: top + row * rowH + 2, width: Math.max(1, x2 - x1), height: rowH - 4,
        fill: colors.get(b.lease), "data-lease": b.lease, "data-host": b.host, "data-start": b.start, "data-end": b.end,
        onmousemove: (e) => tooltip(e, tip), onmouseleave: (e) => tooltip(e, null),
        onclick: () => showLease(b.lease) }));
    }
    const nowT = data.now;
    if (nowT >= startT && nowT <= endT) {
      svg.append(el("svg:line", { class: "now-line", id: "now-line", x1: x(nowT), x2: x(nowT), y1: top - 6, y2: height }));
    }
    if (slotDraw) slotDraw(svg, rowOf);
    svgBox.replaceChildren(svg, el("div", { id: "lease-detail" }));
  }
  draw();

  function showLease(id) {
    const l = data.leases.find((l) => l.id === id);
    if (!l) return;
    $("#lease-detail").replaceChildren(el("p", {}, el("b", { text: l.name }),
      ` · ${l.status} · project ${l.project} · ${fmtDate(l.start)} → ${fmtDate(l.end)} · id ${l.id}`));
  }

  async function findSlot() {
    const type = $("#finder-type").value;
    const hours = Number($("#finder-hours").value), count = Number($("#finder-count").value);
    const params = new URLSearchParams({ resource_type: type, duration: String(Math.round(hours * 3600)) });
    if (type === "physical:host") { params.set("min", String(count)); params.set("max", String(count)); }
    else {
      params.set("amount", String(count)); params.set("vcpus", $("#finder-vcpus").value);
      params.set("memory_mb", $("#finder-ram").value); params.set("disk_gb", $("#finder-disk").value);
    }
    const r = await fetch(`/reservation/v1/availability?${params}`, { headers: { "X-Auth-Token": state.token } });
    const body = await r.json();
    const out = $("#finder-result");
    if (!r.ok) { out.textContent = ` ${body.error_message || r.statusText}`; return; }
    const a = body.availability;
    if (!a) { out.textContent = " no slot within a year"; out.dataset.start = ""; slotDraw = null; draw(); return; }
    const s = Math.floor(Date.parse(a.start_date + (a.start_date.endsWith("Z") ? "" : "Z")) / 1000);
    const e = Math.floor(Date.parse(a.end_date + (a.end_date.endsWith("Z") ? "" : "Z")) / 1000);
    out.textContent = ` earliest: ${a.start_date} → ${a.end_date} on hosts ${a.allocations.map((x) => x.resource_id).join(", ")}`;
    out.dataset.start = a.start_date; out.dataset.end = a.end_date;
    out.dataset.hosts = a.allocations.map((x) => x.resource_id).join(",");
    slotDraw = (svg, rowOf) => {
      for (const alloc of a.allocations) {
        const row = rowOf.get(alloc.resource_id);
        if (row === undefined) continue;
        svg.append(el("svg:rect", { class: "slot", x: x(s), y: top + row * rowH + 1, width: Math.max(2, x(e) - x(s)), height: rowH - 2,
          "data-host": alloc.resource_id }));
      }
    };
    draw();
  }
}

// ---------------------------------------------------------------- projects

async function viewProjects() {
  const data = await api("/dashboard/api/projects");
  const res = ["instances", "cores", "ram", "server_groups"];
  const table = el("table", { id: "project-table" },
    el("tr", {}, el("th", { text: "project" }), ...res.map((r) => el("th", { text: r })), el("th", { class: "num", text: "leases" })));
  for (const p of data.projects) {
    table.append(el("tr", { "data-project": p.project }, el("td", { text: p.project }),
      ...res.map((r) => {
        const { used, limit } = p.resources[r];
        return el("td", { "data-resource": r, "data-used": used }, meter(used, limit), `${used} / ${limit < 0 ? "∞" : limit}`);
      }),
      el("td", { class: "num", text: String(p.leases) })));
  }
  view().replaceChildren(el("h2", { text: "Projects: usage against quota" }), table);
}

// ---------------------------------------------------------------- activity

async function viewActivity() {
  await drawActivity();
  state.timer = setInterval(() => { drawActivity().catch(() => {}); }, 5000);
}

async function drawActivity() {
  const d = await api("/dashboard/api/activity");
  const prev = state.activityPrev;
  state.activityPrev = { at: performance.now(), d };
  const rate = (name) => {
    if (!prev) return "";
    const dt = (performance.now() - prev.at) / 1000;
    const a = prev.d.counters[name] || 0, b = d.counters[name] || 0;
    return dt > 0 ? ((b - a) / dt).toFixed(2) + "/s" : "";
  };
  const counters = el("table", { id: "activity-counters" }, el("tr", {}, el("th", { text: "counter" }), el("th", { class: "num", text: "total" }), el("th", { class: "num", text: "rate" })));
  for (const [name, v] of Object.entries(d.counters)) {
    counters.append(el("tr", { "data-counter": name }, el("td", { text: name }), el("td", { class: "num", text: String(v) }), el("td", { class: "num", text: rate(name) })));
  }
  const gauges = el("table", { id: "activity-gauges" }, el("tr", {}, el("th", { text: "gauge" }), el("th", { class: "num", text: "value" })));
  for (const [name, v] of Object.entries(d.gauges)) gauges.append(el("tr", {}, el("td", { text: name }), el("td", { class: "num", text: String(v) })));
  const lat = el("table", { id: "activity-latency" }, el("tr", {}, ...["route", "method", "requests", "mean ms", "p50 ≤ ms", "p99 ≤ ms"].map((t) => el("th", { text: t }))));
  for (const l of d.latency.sort((a, b) => b.count - a.count).slice(0, 25)) {
    lat.append(el("tr", {}, el("td", { text: l.route }), el("td", { text: l.method }), el("td", { class: "num", text: String(l.count) }),
      el("td", { class: "num", text: (l.mean * 1000).toFixed(2) }), el("td", { class: "num", text: String(l.p50 * 1000) }), el("td", { class: "num", text: String(l.p99 * 1000) })));
  }
  const ms = (sec) => (sec * 1000).toFixed(sec < 0.01 ? 1 : 0);
  const figure = (id, label, value, raw) => el("div", { class: "figure" },
    el("span", { class: "figure-label", text: label }), el("b", { id, "data-value": raw, text: value }));
  const t = d.timings;
  const boots = prev ? rate("berth_compute_boots_accepted_total") : "—";
  const actives = prev ? rate("berth_compute_instances_active_total") : "—";
  const figures = el("div", { class: "figures", id: "activity-figures" },
    figure("boots-rate", "boots accepted", boots, ""),
    figure("active-rate", "gone ACTIVE", actives, ""),
    figure("tta-p50", "time to ACTIVE p50 ≤ ms", ms(t.time_to_active.p50), t.time_to_active.p50),
    figure("tta-p99", "time to ACTIVE p99 ≤ ms", ms(t.time_to_active.p99), t.time_to_active.p99),
    figure("sched-p50", "scheduler p50 ≤ ms", ms(t.scheduler.p50), t.scheduler.p50),
    figure("sched-p99", "scheduler p99 ≤ ms", ms(t.scheduler.p99), t.scheduler.p99),
    figure("claim-p50", "claim p50 ≤ ms", ms(t.claim.p50), t.claim.p50),
    figure("claim-p99", "claim p99 ≤ ms", ms(t.claim.p99), t.claim.p99),
    figure("builds-failed", "builds failed", String(d.boots.failed), d.boots.failed),
    figure("boots-buried", "no valid host", String(d.boots.buried), d.boots.buried));
  const counts = `${t.time_to_active.count} boots timed to ACTIVE, ${t.scheduler.count} scheduler runs, ${t.claim.count} claims` +
    ` (bucket upper bounds; means ${ms(t.time_to_active.mean)} / ${ms(t.scheduler.mean)} / ${ms(t.claim.mean)} ms)`;
  view().replaceChildren(el("h2", { text: "Activity" }),
    el("p", { class: "summary" }, `Requests ${d.requests.total} · 4xx ${d.requests["4xx"]} · 5xx `, el("b", { id: "errors-5xx", text: String(d.requests["5xx"]) }),
      ` · refreshed `, el("span", { id: "activity-refreshed", "data-now": d.now, text: `${new Date().toISOString().slice(11, 19)}Z` }), " (every 5 s)"),
    figures, el("p", { class: "hint", id: "activity-timed", text: counts }),
    el("h3", { text: "Request latency (busiest routes)" }), lat,
    el("h3", { text: "Counters" }), counters, el("h3", { text: "Gauges" }), gauges);
  view().dataset.ready = "true";
}

const VIEWS = { capacity: viewCapacity, flavors: viewFlavors, calendar: viewCalendar, projects: viewProjects, activity: viewActivity };

start().catch((e) => { view().replaceChildren(el("p", { class: "error", text: String(e) })); });
