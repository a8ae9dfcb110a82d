// The agents page: one row per agent (its latest session), paged, filtered and
// sorted by the server (GET /api/agents), with the count of each status so
// failed and waiting agents are found at a glance; fleet controls over the
// selected or all matching agents (components/bulk_bar.js); and the form to
// start one.
//
// The filters live in the address ("#/?status=running&moniker=joke&q=owl&sort=updated"),
// so a reload, a link or back/forward shows the same list; a set of them can be
// saved under a name, in this browser (components/saved_views.js).  Rows are keyed by
// agent id and updated in place, never redrawn: a live update does not take
// the focus, the checkbox state or the row under the pointer away.  Anything
// that would move rows (a new agent, a status leaving the filter, any change
// under "recently active") is not applied under the user: a button says how
// many agents have new activity and reorders when asked, and the list reorders
// by itself only while the pointer and the focus are elsewhere (never under
// "recently active", which would reorder constantly).  Hand-written rather
// than a library: one table of at most 50 rows keyed by id needs ~40 lines.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { agentLabel, badge, reasonWords, short, splitError, statusWord, stepNumber, when } from "../core/format.js";
import { merged, omittedOf } from "../core/live.js";
import { registerPage } from "../core/registry.js";
import { toast } from "../core/toast.js";
import { bulkBar } from "../components/bulk_bar.js";
import { createForm } from "../components/create_form.js";
import { savedViews } from "../components/saved_views.js";

const STATUSES = ["running", "waiting", "paused", "error", "done", "stopped", "stopping"];
const SORTS = [["newest", "newest first"], ["oldest", "oldest first"], ["updated", "recently active"],
  ["name", "by name"]];
const DEFAULTS = { status: "", moniker: "", q: "", sort: "newest", offset: 0 };
const LIMIT = 50;
const filters = { ...DEFAULTS };
const rows = new Map();  // agent_id -> {row, cells, agent}: the rows on this page, in place
const chipButtons = new Map();  // status ("" = all) -> its button
const selection = { mode: "none", ids: new Set() };  // mode: none | ids | matching
const fresh = new Set();  // agents with activity the list's order does not show yet
let total = 0;
let ui = null;
let reloadTimer = null;
let cameFrom = null;  // the location before the last change of it
let formLoaded = false;
let typingEntry = false;  // the current history entry is a search being typed
let loads = 0;  // loads started: only the latest one's answer is drawn
let fullPending = false;  // a full load was asked for and its answer not drawn yet
let wantFull = true;  // the next load redraws the list in its new order (a new view, a user's request)

window.addEventListener("hashchange", (e) => { cameFrom = new URL(e.oldURL).hash; });

// ---- the address ------------------------------------------------------------

function fromAddress(query) {
  const sort = query.get("sort");
  const status = query.get("status");
  const offset = Number.parseInt(query.get("offset") || "0", 10);
  return {
    status: STATUSES.includes(status) ? status : "", moniker: (query.get("moniker") || "").slice(0, 128),
    q: (query.get("q") || "").slice(0, 200), sort: SORTS.some(([v]) => v === sort) ? sort : "newest",
    offset: Number.isFinite(offset) && offset > 0 ? offset - (offset % LIMIT) : 0,
  };
}

function address(f) {
  const q = new URLSearchParams();
  for (const key of Object.keys(DEFAULTS)) if (f[key] !== DEFAULTS[key]) q.set(key, f[key]);
  const text = q.toString();
  return "#/" + (text ? "?" + text : "");
}

// A filter changed by a control: a new history entry, which the router turns
// into enter() and a catch-up (load).  Typing makes one entry and keeps
// replacing it while the typing goes on (pushState: the router is not involved).
function setFilters(change, { typing = false } = {}) {
  const next = { ...filters, ...change };
  if (!("offset" in change)) next.offset = 0;
  if (["status", "moniker", "q"].some((k) => next[k] !== filters[k])) clearSelection();
  Object.assign(filters, next);
  ui.views.update();
  const target = address(filters);
  if (typing) {  // one history entry per search typed, not one per key
    if (typingEntry) history.replaceState(history.state, "", target);
    else history.pushState(history.state, "", target);
    typingEntry = true;
    return scheduleReload(250, true);
  }
  typingEntry = false;
  if (location.hash !== target) location.hash = target;
  else load({ full: true }).catch(failed);
}

// ---- building the page --------------------------------------------------------

function mount(section) {
  const creator = createForm();
  const search = h("input", { type: "search", id: "agents-q", placeholder: "name, task or id",
    "aria-label": "Search agents by name, task or id", dataset: { testid: "agents-search" },
    oninput: () => setFilters({ q: search.value.trim() }, { typing: true }) });
  const moniker = h("select", { id: "agents-moniker", "aria-label": "Filter by moniker",
    dataset: { testid: "agents-moniker" }, onchange: () => setFilters({ moniker: moniker.value }) },
  h("option", { value: "" }, "every moniker"));
  const sort = h("select", { id: "agents-sort", "aria-label": "Sort agents", dataset: { testid: "agents-sort" },
    onchange: () => setFilters({ sort: sort.value }) }, SORTS.map(([v, label]) => h("option", { value: v }, label)));
  const pickPage = h("input", { type: "checkbox", "aria-label": "Select every agent on this page",
    dataset: { testid: "agents-pick-page" }, onchange: () => pickAll(pickPage.checked) });
  const bar = bulkBar({ selection: currentSelection, selectAllMatching, clear: clearSelection,
    done: () => scheduleReload(300, true) });
  ui = {
    creator, search, moniker, sort, pickPage, bar,
    views: savedViews({ current: () => address({ ...filters, offset: 0 }) }),
    chips: h("div.chips", { role: "group", "aria-label": "Filter by status", dataset: { testid: "status-filter" } }),
    body: h("tbody", { id: "agents-body" }),
    table: null,
    empty: h("p.empty", { id: "agents-empty", hidden: true }),
    count: h("p.count", { "aria-live": "polite", dataset: { testid: "agents-count" } }),
    newer: h("button.new-activity", { type: "button", hidden: true, dataset: { testid: "agents-new-activity" },
      onclick: () => load({ full: true }).catch(failed) }),
    prev: h("button", { type: "button", dataset: { testid: "page-prev" }, onclick: () => turn(-1) }, "‹ Previous"),
    next: h("button", { type: "button", dataset: { testid: "page-next" }, onclick: () => turn(1) }, "Next ›"),
  };
  ui.table = h("table.list.agents", { dataset: { testid: "agents-table" } },
    h("caption.visually-hidden", "Agents"),
    h("thead", h("tr", h("th.pick", { scope: "col" }, pickPage),
      ["Agent", "Moniker", "Status", "Steps", "Last output", "Updated"].map((c) => h("th", { scope: "col" }, c)))),
    ui.body);
  // Rows reorder by themselves only while nobody is pointing at or working in the list.
  ui.table.addEventListener("pointerleave", settle);
  ui.table.addEventListener("focusout", () => setTimeout(settle, 0));
  replace(section, h("div.columns",
    h("div.panel.grow",
      h("h1", "Agents ", h("small", "the latest session of each, updating live")),
      jumpToForm(creator.form),
      h("div.toolbar", search, moniker, sort), ui.chips, ui.views.root, bar.root,
      // the "new activity" button floats over the table's head: showing it moves no row
      h("div.table-wrap.with-activity", ui.newer, ui.table),
      ui.empty,
      h("nav.pager", { "aria-label": "Pages of agents" }, ui.prev, ui.count, ui.next)),
    creator.form));
}

// Shown only where the form comes after the list (narrow screens, dashboard.css):
// brings the form's heading to the top and puts the focus in its first field.
function jumpToForm(form) {
  return h("button.jump-create", { type: "button", dataset: { testid: "jump-to-create" }, onclick: () => {
    form.scrollIntoView({ block: "start" });
    form.querySelector("select, input, textarea")?.focus({ preventScroll: true });
  } }, "Start an agent ↓");
}

function turn(direction) {
  setFilters({ offset: Math.max(0, filters.offset + direction * LIMIT) });
}

// The controls show what the address says (after a reload, a link, back/forward).
function showFilters() {
  if (ui.search.value.trim() !== filters.q) ui.search.value = filters.q;
  if (filters.moniker && ![...ui.moniker.options].some((o) => o.value === filters.moniker)) {
    ui.moniker.append(h("option", { value: filters.moniker }, filters.moniker));
  }
  ui.moniker.value = filters.moniker;
  ui.sort.value = filters.sort;
}

// The moniker filter's choices: the create form's monikers (it reads them).
function showMonikers(monikers) {
  const names = new Set(monikers.map((m) => m.name));
  if (filters.moniker) names.add(filters.moniker);
  replace(ui.moniker, h("option", { value: "" }, "every moniker"),
    [...names].sort().map((name) => h("option", { value: name }, name)));
  ui.moniker.value = filters.moniker;
}

// ---- the list -------------------------------------------------------------------

// full: the rows as the server orders them now; else (a catch-up or a live
// change while someone works in the list) the rows shown are updated in place
// and what would move is counted on the "new activity" button.
async function load({ full = false } = {}) {
  clearTimeout(reloadTimer);
  reloadTimer = null;
  if (full) {
    wantFull = false;
    fullPending = true;
  }
  const { status, moniker, q, sort, offset } = filters;
  const mine = ++loads;
  const data = await get("/api/agents", { status, moniker, q, sort, offset, limit: LIMIT });
  if (mine !== loads) return;  // a later load was started: its answer is newer (and full if this one was)
  full = fullPending;
  fullPending = false;
  if (status !== filters.status || moniker !== filters.moniker || q !== filters.q || sort !== filters.sort ||
      offset !== filters.offset) return;  // the filters changed meanwhile: a newer load follows
  total = data.total;
  if (full) fresh.clear();
  keepFocus(() => {
    if (full) drawRows(data.agents);
    else patchRows(data.agents);
    // A sub-agent's row is filled before its parent's (newest first): name the parents now.
    for (const entry of rows.values()) fillParent(entry.cells.parent, entry.agent);
    drawChips(data.counts);
  });
  const first = data.total ? offset + 1 : 0;
  const filtered = status || moniker || q;
  ui.count.textContent = `${first}–${offset + data.agents.length} of ${data.total}` + (filtered ? " matching" : "");
  ui.prev.disabled = offset === 0;
  ui.next.disabled = offset + data.agents.length >= data.total;
  ui.empty.hidden = data.total > 0;
  ui.empty.textContent = filtered ? "No agent matches these filters." : "No agents yet. Start one with the form.";
  showActivity();
  drawSelection();
}

// Rows keyed by agent id: kept, updated in place, added, removed; a row is
// moved only when the order changed.
function drawRows(agents) {
  const wanted = agents.map((a) => {
    const known = rows.get(a.agent_id);
    if (!known) rows.set(a.agent_id, makeRow(a));
    else if (known.agent.session_id !== a.session_id || (a.updated_at || "") >= (known.agent.updated_at || "")) {
      fillRow(known, a);  // not back to what a live update has already moved past
    }
    return rows.get(a.agent_id).row;
  });
  const ids = new Set(agents.map((a) => a.agent_id));
  for (const [id, entry] of rows) {
    if (!ids.has(id)) {
      entry.row.remove();
      rows.delete(id);
    }
  }
  let cursor = ui.body.firstChild;
  for (const row of wanted) {
    if (row === cursor) cursor = cursor.nextSibling;
    else ui.body.insertBefore(row, cursor);
  }
}

function patchRows(agents) {
  const ids = new Set(agents.map((a) => a.agent_id));
  const shown = [...ui.body.children].map((tr) => tr.dataset.agent);
  shown.filter((id) => !ids.has(id)).forEach((id) => fresh.add(id));  // it would leave the page
  const kept = shown.filter((id) => ids.has(id));
  agents.filter((a) => {
    const known = rows.get(a.agent_id);
    if (known && known.agent.session_id === a.session_id) {
      if ((a.updated_at || "") >= (known.agent.updated_at || "")) fillRow(known, a);
      return true;
    }
    fresh.add(a.agent_id);  // it would join the page
    return false;
  }).forEach((a, i) => { if (kept[i] !== a.agent_id) fresh.add(a.agent_id); });  // it would move
}

function makeRow(a) {
  const cells = {
    pick: h("input", { type: "checkbox", dataset: { testid: "agent-pick" },
      onchange: () => pickOne(a.agent_id, cells.pick.checked) }),
    link: h("a.agent-link"),
    id: h("code"),
    task: h("span"),
    parent: h("span", { dataset: { testid: "agent-parent" } }),
    moniker: h("td", { dataset: { label: "Moniker" } }),
    status: h("td", { dataset: { label: "Status" } }),
    steps: h("td", { dataset: { label: "Steps" } }),
    output: h("td.text", { dataset: { label: "Last output" } }),
    updated: h("td", { dataset: { label: "Updated" } }),
  };
  const row = h("tr.clickable", { dataset: { agent: a.agent_id, testid: "agent-row" },
    onclick: (e) => { if (!e.target.closest("a, input, label, button")) location.hash = cells.link.getAttribute("href"); } },
  h("td.pick", cells.pick),
  h("td", { dataset: { label: "Agent" } }, cells.link, h("div.hint", cells.id, cells.task, cells.parent)),
  cells.moniker, cells.status, cells.steps, cells.output, cells.updated);
  const entry = { row, cells, agent: null };
  fillRow(entry, a);
  return entry;
}

function fillRow(entry, a) {
  const { cells } = entry;
  const old = entry.agent || {};
  entry.agent = a;
  const set = (node, text) => { if (node.textContent !== text) node.textContent = text; };
  const href = "#/session/" + a.session_id;
  if (cells.link.getAttribute("href") !== href) cells.link.setAttribute("href", href);
  if (cells.link.title !== a.agent_id) cells.link.title = a.agent_id;
  set(cells.link, agentLabel(a));
  cells.pick.setAttribute("aria-label", "Select " + agentLabel(a));
  set(cells.id, short(a.agent_id));
  set(cells.task, a.task ? " · " + a.task : "");
  set(cells.moniker, a.moniker || "");
  fillParent(cells.parent, a);
  if (old.status !== a.status || old.status_reason !== a.status_reason || !cells.status.firstChild) {
    replace(cells.status, badge(a.status), a.status_reason ? h("div.hint", reasonWords(a.status_reason, a.status)) : null);
  }
  set(cells.steps, a.iteration >= 0 ? String(stepNumber(a.iteration)) : "–");
  const output = a.status === "error" && a.last_error ? splitError(a.last_error).sentence
    : (a.result && a.result.text) || "";
  set(cells.output, output);
  cells.output.title = output;
  cells.output.classList.toggle("bad", a.status === "error");
  if (old.updated_at !== a.updated_at || !cells.updated.firstChild) replace(cells.updated, when(a.updated_at));
  cells.pick.checked = selection.mode === "matching" || selection.ids.has(a.agent_id);
}

// A sub-agent names its parent as the parent's own row would (its name, or
// its tag), from the parent's row when it is on this page, else from the
// row's parent_name (GET /api/agents); the short id only when neither is known.
function fillParent(cell, a) {
  const href = a.parent_session_id ? "#/session/" + a.parent_session_id : "";
  const known = a.parent_agent_id && rows.get(a.parent_agent_id);
  const name = known ? agentLabel(known.agent)
    : a.parent_agent_id ? agentLabel({ name: a.parent_name, agent_id: a.parent_agent_id })
      : short(a.parent_session_id || "");
  const link = cell.querySelector("a");
  if (!href) { if (cell.firstChild) replace(cell); return; }
  if (link && link.getAttribute("href") === href && link.textContent === name) return;
  replace(cell, " · sub-agent of ", h("a", { href, dataset: { testid: "agent-parent-link" } }, name));
}

// Chips keyed by status, like the rows: a focused chip stays focused.
function drawChips(counts) {
  const all = Object.values(counts).reduce((a, b) => a + b, 0);
  const wanted = [["", "all", all],
    ...STATUSES.filter((s) => counts[s] || filters.status === s).map((s) => [s, statusWord(s), counts[s] || 0])];
  const keep = new Set(wanted.map(([value]) => value));
  for (const [value, button] of chipButtons) {
    if (!keep.has(value)) {
      button.remove();
      chipButtons.delete(value);
    }
  }
  let cursor = ui.chips.firstChild;
  for (const [value, label, n] of wanted) {
    let button = chipButtons.get(value);
    if (!button) {
      button = h("button.chip", { type: "button", dataset: { status: value || "all", testid: "chip-" + (value || "all") },
        onclick: () => setFilters({ status: value }) }, label, " ", h("span.n"));
      chipButtons.set(value, button);
    }
    button.setAttribute("aria-pressed", String(filters.status === value));
    button.querySelector(".n").textContent = String(n);
    if (button === cursor) cursor = cursor.nextSibling;
    else ui.chips.insertBefore(button, cursor);
  }
}

// Moving a node takes the focus off it: give it back.
function keepFocus(change) {
  const focused = document.activeElement;
  change();
  if (focused && focused !== document.body && focused.isConnected && document.activeElement !== focused) {
    focused.focus({ preventScroll: true });
  }
}

// ---- live activity -------------------------------------------------------------

function busy() {
  return ui.table.matches(":hover") || ui.table.contains(document.activeElement);
}

// Whether the list must not reorder by itself now: while someone points at or
// works in it, and under "recently active" (which would reorder on every step)
// unless it is empty.
const held = () => busy() || (filters.sort === "updated" && rows.size > 0);

// Something changed that would move rows: reorder now, or (under the pointer,
// the focus, or "recently active") count it on the "new activity" button.
function moved(agentId) {
  fresh.add(agentId);
  if (!held()) scheduleReload();
  else showActivity();
}

function settle() {
  if (fresh.size && !held()) scheduleReload(300);
}

function showActivity() {
  ui.newer.hidden = fresh.size === 0;
  const n = fresh.size;
  ui.newer.textContent = `${n} ${n === 1 ? "agent has" : "agents have"} new activity — reorder`;
}

// Live changes reload at most every 1.5 s (throttle), so hundreds of busy agents
// do not keep the page reloading; typing waits for a pause (debounce).
function scheduleReload(delay = 1500, full = false) {
  if (full) wantFull = true;
  if (reloadTimer && delay >= 1000) return;
  clearTimeout(reloadTimer);
  reloadTimer = setTimeout(() => {
    reloadTimer = null;
    refresh().catch(failed);
  }, delay);
}

// A load that reorders the list only when asked to or when nobody is in it.
function refresh() {
  return load({ full: wantFull || !held() });
}

function failed(err) {
  toast("Could not load agents: " + err.message, true);
}

// ---- selection -------------------------------------------------------------------

function currentSelection() {
  if (selection.mode === "matching") {
    const { status, moniker, q } = filters;
    const filter = { ...(status && { status }), ...(moniker && { moniker }), ...(q && { q }) };
    return { mode: "matching", ids: [], count: total, filter };
  }
  return { mode: selection.ids.size ? "ids" : "none", ids: [...selection.ids], count: selection.ids.size };
}

function pickOne(agentId, on) {
  if (selection.mode === "matching") {  // unticking one of "all matching": the rows shown, less that one
    selection.mode = "ids";
    selection.ids = new Set(rows.keys());
  }
  if (on) selection.ids.add(agentId);
  else selection.ids.delete(agentId);
  selection.mode = selection.ids.size ? "ids" : "none";
  drawSelection();
}

function pickAll(on) {
  if (selection.mode === "matching" && !on) return clearSelection();
  selection.mode = "ids";
  for (const id of rows.keys()) {
    if (on) selection.ids.add(id);
    else selection.ids.delete(id);
  }
  if (!selection.ids.size) selection.mode = "none";
  drawSelection();
}

function selectAllMatching() {
  selection.mode = "matching";
  selection.ids.clear();
  drawSelection();
}

function clearSelection() {
  selection.mode = "none";
  selection.ids.clear();
  if (ui) drawSelection();
}

function drawSelection() {
  const all = selection.mode === "matching";
  let picked = 0;
  for (const [id, entry] of rows) {
    entry.cells.pick.checked = all || selection.ids.has(id);
    if (entry.cells.pick.checked) picked += 1;
  }
  ui.pickPage.checked = rows.size > 0 && picked === rows.size;
  ui.pickPage.indeterminate = picked > 0 && picked < rows.size;
  ui.bar.refresh(total);
}

// ---- the page ----------------------------------------------------------------------

registerPage({
  name: "agents",
  nav: { label: "Agents", href: "#/", order: 10 },
  match: (parts) => (parts.length === 0 ? {} : null),
  fallback: true,  // an unknown location shows this page
  mount,
  enter(params) {
    typingEntry = false;
    wantFull = true;
    const wanted = fromAddress(params.query || new URLSearchParams());
    if (["status", "moniker", "q"].some((k) => wanted[k] !== filters[k])) clearSelection();
    Object.assign(filters, wanted);
    showFilters();
    ui.views.update();
    // The form and the moniker list load when the page is shown, not when only its filters changed.
    const fromHere = formLoaded && cameFrom !== null && fromAddressPath(cameFrom);
    if (!fromHere) {
      formLoaded = true;
      ui.creator.load().then(showMonikers, (err) => toast("Could not load the form: " + err.message, true));
    }
  },
  rooms: () => ["all"],
  catchUp: () => refresh().then(() => ui.creator.clearUnreachable()).catch(failed),
  on: {
    // A row on this page is updated in place; a change that may move rows is
    // applied when nobody is working in the list, or counted on the "new activity" button.
    // An event carries what changed (domain/events.py); a field it left out for
    // its size keeps the row's value, and a shown one that can change (the last
    // output or error) is read with the list again.
    agent_state(snapshot) {
      const known = rows.get(snapshot.agent_id);
      if (!known || known.agent.session_id !== snapshot.session_id) {
        if (snapshot.status !== "pending") moved(snapshot.agent_id);
        return;
      }
      if ((snapshot.updated_at || "") < (known.agent.updated_at || "")) return;
      const before = known.agent;
      fillRow(known, merged(before, snapshot));
      if (omittedOf(snapshot).some((key) => ["result", "last_error"].includes(key))) scheduleReload();
      if (filters.sort === "updated" ? (snapshot.updated_at || "") > (before.updated_at || "")
        : before.status !== snapshot.status) moved(snapshot.agent_id);
    },
  },
});

// The agents page's own path: "#/", "#", "" (a query after "?" is its filters).
function fromAddressPath(hash) {
  const path = (hash || "").split("?")[0];
  return path === "" || path === "#" || path === "#/";
}
