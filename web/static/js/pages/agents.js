// The agents page: one row per agent (its latest session), paged, filtered and
// sorted by the server (GET /api/agents), with the count of each status so
// failed and waiting agents are found at a glance; and the form to start one.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { agentLabel, badge, reasonWords, short, splitError, statusWord, stepNumber, when } from "../core/format.js";
import { registerPage } from "../core/registry.js";
import { toast } from "../core/toast.js";
import { createForm } from "../components/create_form.js";

const STATUSES = ["running", "waiting", "paused", "error", "done", "stopped", "stopping"];
const filters = { status: "", q: "", sort: "newest", offset: 0, limit: 50 };
const shown = new Map();  // agent_id -> row on this page
let ui = null;
let reloadTimer = null;

function mount(section) {
  const creator = createForm();
  const search = h("input", { type: "search", id: "agents-q", placeholder: "name, task or id",
    "aria-label": "Search agents by name, task or id", dataset: { testid: "agents-search" },
    oninput: () => { filters.q = search.value.trim(); filters.offset = 0; scheduleReload(250); } });
  const sort = h("select", { id: "agents-sort", "aria-label": "Sort agents", dataset: { testid: "agents-sort" },
    onchange: () => { filters.sort = sort.value; filters.offset = 0; load(); } },
  [["newest", "newest first"], ["oldest", "oldest first"], ["updated", "recently active"], ["name", "by name"]]
    .map(([v, label]) => h("option", { value: v }, label)));
  ui = {
    creator,
    chips: h("div.chips", { role: "group", "aria-label": "Filter by status", dataset: { testid: "status-filter" } }),
    body: h("tbody", { id: "agents-body" }),
    empty: h("p.empty", { id: "agents-empty", hidden: true }),
    count: h("p.count", { "aria-live": "polite", dataset: { testid: "agents-count" } }),
    prev: h("button", { type: "button", dataset: { testid: "page-prev" }, onclick: () => turn(-1) }, "‹ Previous"),
    next: h("button", { type: "button", dataset: { testid: "page-next" }, onclick: () => turn(1) }, "Next ›"),
  };
  replace(section, h("div.columns",
    h("div.panel.grow",
      h("h2", "Agents ", h("small", "the latest session of each, updating live")),
      h("div.toolbar", search, sort), ui.chips,
      h("div.table-wrap", h("table.list", { dataset: { testid: "agents-table" } },
        h("caption.visually-hidden", "Agents"),
        h("thead", h("tr", ["Agent", "Moniker", "Status", "Steps", "Last output", "Updated"]
          .map((c) => h("th", { scope: "col" }, c)))),
        ui.body)),
      ui.empty,
      h("nav.pager", { "aria-label": "Pages of agents" }, ui.prev, ui.count, ui.next)),
    creator.form));
}

function turn(direction) {
  filters.offset = Math.max(0, filters.offset + direction * filters.limit);
  load();
}

async function load() {
  const { status, q, sort, offset, limit } = filters;
  const data = await get("/api/agents", { status, q, sort, offset, limit });
  shown.clear();
  replace(ui.body, data.agents.map((a) => {
    const row = agentRow(a);
    shown.set(a.agent_id, { row, agent: a });
    return row;
  }));
  drawChips(data.counts);
  const first = data.total ? offset + 1 : 0;
  ui.count.textContent = `${first}–${offset + data.agents.length} of ${data.total}` +
    (status || q ? " matching" : "");
  ui.prev.disabled = offset === 0;
  ui.next.disabled = offset + data.agents.length >= data.total;
  ui.empty.hidden = data.total > 0;
  ui.empty.textContent = status || q ? "No agent matches these filters." : "No agents yet. Start one with the form.";
}

function drawChips(counts) {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const chip = (value, label, n) => h("button.chip", { type: "button", "aria-pressed": String(filters.status === value),
    dataset: { status: value || "all", testid: "chip-" + (value || "all") },
    onclick: () => { filters.status = value; filters.offset = 0; load(); } },
  label, " ", h("span.n", String(n)));
  replace(ui.chips, chip("", "all", total),
    STATUSES.filter((s) => counts[s] || filters.status === s).map((s) => chip(s, statusWord(s), counts[s] || 0)));
}

function agentRow(a) {
  const href = "#/session/" + a.session_id;
  const output = a.status === "error" && a.last_error ? splitError(a.last_error).sentence
    : (a.result && a.result.text) || "";
  return h("tr.clickable", { dataset: { agent: a.agent_id, testid: "agent-row" },
    onclick: (e) => { if (!e.target.closest("a")) location.hash = href; } },
  h("td", { dataset: { label: "Agent" } },
    h("a.agent-link", { href, title: a.agent_id }, agentLabel(a)),
    h("div.hint", h("code", short(a.agent_id)), a.task ? " · " + a.task : "")),
  h("td", { dataset: { label: "Moniker" } }, a.moniker || ""),
  h("td", { dataset: { label: "Status" } }, badge(a.status),
    a.status_reason ? h("div.hint", reasonWords(a.status_reason, a.status)) : null),
  h("td", { dataset: { label: "Steps" } }, a.iteration >= 0 ? String(stepNumber(a.iteration)) : "–"),
  h("td.text" + (a.status === "error" ? ".bad" : ""), { dataset: { label: "Last output" }, title: output }, output),
  h("td", { dataset: { label: "Updated" } }, when(a.updated_at)));
}

// Typing waits for a pause (debounce); live changes reload at most every 1.5 s
// (throttle), so hundreds of busy agents do not keep the page reloading.
function scheduleReload(delay = 1500) {
  if (reloadTimer && delay >= 1000) return;
  clearTimeout(reloadTimer);
  reloadTimer = setTimeout(() => {
    reloadTimer = null;
    load().catch((err) => toast("Could not load agents: " + err.message, true));
  }, delay);
}

registerPage({
  name: "agents",
  nav: { label: "Agents", href: "#/", order: 10 },
  match: (parts) => (parts.length === 0 ? {} : null),
  fallback: true,  // an unknown location shows this page
  mount,
  enter() {
    ui.creator.load().catch((err) => toast("Could not load the form: " + err.message, true));
  },
  rooms: () => ["all"],
  catchUp: () => load().then(() => ui.creator.clearUnreachable())
    .catch((err) => toast("Could not load agents: " + err.message, true)),
  on: {
    // A row on this page is updated in place; anything that may move rows
    // (a new agent, a status change under a filter) reloads the page shortly.
    agent_state(snapshot) {
      const known = shown.get(snapshot.agent_id);
      if (!known || known.agent.session_id !== snapshot.session_id) return scheduleReload();
      if ((snapshot.updated_at || "") < (known.agent.updated_at || "")) return;
      const row = agentRow(snapshot);
      known.row.replaceWith(row);
      shown.set(snapshot.agent_id, { row, agent: snapshot });
      if (known.agent.status !== snapshot.status) scheduleReload();
    },
  },
});
