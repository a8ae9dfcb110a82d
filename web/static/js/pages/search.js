// The search page (#/search?q=words&kind=…): full-text (and, when the service has
// embeddings, semantic) search over steps, messages, tool calls and summaries
// (GET /api/search).  Each result links to the exact row: the session page
// scrolled to its step (and tool call), or the conversation at its message, and
// is named by its agent's name (the API adds it to each hit).  The filters
// (kind, status, moniker, agent, time range) and the page (offset) live in the
// address, so reload, links and back/forward keep them: a change of a filter
// only changes the hash, and the router runs the search again.
// Matched words are <mark>ed from the API's highlight offsets; the record's text
// only ever becomes text nodes, never HTML.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { short, stepNumber, tag, when } from "../core/format.js";
import { registerPage } from "../core/registry.js";
import { showWords } from "../components/search_box.js";

// The hash's query keys passed on to the API (the rest are ignored).
const FILTERS = ["q", "kind", "agent_id", "session_id", "conversation_id", "status", "since", "until", "moniker",
  "limit", "offset", "mode"];
const KIND_WORDS = { step: "step", message: "message", tool_call: "tool call", summary: "summary" };
// The statuses a step or tool call can have (store/search.py STATUSES).
const STATUSES = ["ok", "done", "error", "interrupted", "pending", "running", "success", "failed", "denied",
  "waiting_approval", "waiting_result", "replayed", "unknown"];
const PAGE = 20;

let ui = null;
let generation = 0;  // answers to an older search are dropped
let query = new URLSearchParams();

function mount(section) {
  const select = (key, label, options) => h("label", { for: "sf-" + key }, label,
    h("select", { id: "sf-" + key, name: key, dataset: { testid: "search-filter-" + key }, onchange: applyFilters },
      h("option", { value: "" }, "any"), options.map((v) => h("option", { value: v }, v.replace(/_/g, " ")))));
  const input = (key, label, attrs) => h("label", { for: "sf-" + key }, label,
    h("input", { id: "sf-" + key, name: key, dataset: { testid: "search-filter-" + key }, onchange: applyFilters,
      ...attrs }));
  ui = {
    title: h("h1", { id: "search-title", tabindex: "-1" }, "Search"),
    kinds: h("fieldset.search-kinds", h("legend", "Kinds"), Object.entries(KIND_WORDS).map(([kind, word]) =>
      h("label.check", { for: "sf-kind-" + kind }, h("input", { type: "checkbox", id: "sf-kind-" + kind, value: kind,
        dataset: { testid: "search-kind-" + kind }, onchange: applyFilters }), " ", word))),
    moniker: select("moniker", "Moniker", []),
    status: select("status", "Status", STATUSES),
    agent: input("agent_id", "Agent id", { maxlength: "128", autocomplete: "off", placeholder: "any agent" }),
    since: input("since", "From", { type: "datetime-local" }),
    until: input("until", "Until", { type: "datetime-local" }),
    meta: h("p.hint", { role: "status", dataset: { testid: "search-meta" } }),
    list: h("ol.search-results", { dataset: { testid: "search-results" }, "aria-labelledby": "search-title" }),
    empty: h("p.empty", { hidden: true }, "Nothing found. Try other words, or fewer of them or of the filters."),
    prev: h("button", { type: "button", dataset: { testid: "search-prev" }, onclick: () => turn(-1) }, "← Previous"),
    next: h("button", { type: "button", dataset: { testid: "search-next" }, onclick: () => turn(1) }, "Next →"),
    range: h("p.count", { dataset: { testid: "search-range" } }),
    evals: h("p.hint", { hidden: true }, h("a", { dataset: { testid: "search-evalset" } },
      "Replay and score the sessions found: make an eval set of them")),
  };
  const filters = h("form.search-filters", { "aria-label": "Search filters", dataset: { testid: "search-filters" },
    onsubmit: (e) => { e.preventDefault(); applyFilters(); } },
  ui.kinds, h("div.toolbar", ui.moniker, ui.status, ui.agent, ui.since, ui.until),
  h("div.inline", h("button", { type: "submit" }, "Apply filters"),
    h("button", { type: "button", dataset: { testid: "search-clear" }, onclick: clearFilters }, "Clear filters")));
  ui.pager = h("div.pager", { hidden: true }, ui.prev, ui.range, ui.next);
  replace(section, h("div.panel", ui.title, filters, ui.meta, ui.list, ui.empty, ui.pager, ui.evals));
  loadMonikers();
}

async function loadMonikers() {
  try {
    const m = await get("/api/monikers");
    const sel = ui.moniker.querySelector("select");
    replace(sel, h("option", { value: "" }, "any"), m.monikers.map((x) => h("option", { value: x.name }, x.name)));
    sel.value = query.get("moniker") || "";
  } catch (err) { /* the filter stays "any": a search still works */ }
}

// ---- the address holds the filters -----------------------------------------------

const control = (label) => label.querySelector("input, select");

// "2026-11-26T15:00:00.000Z" <-> "2026-11-26T16:00" (the datetime-local field is in local time)
function toLocal(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
const fromLocal = (value) => (value ? new Date(value).toISOString() : "");

// The form shows what the address says (on every enter: reload, back/forward).
function showFilters() {
  const kinds = (query.get("kind") || "").split(",");
  ui.kinds.querySelectorAll("input").forEach((box) => (box.checked = kinds.includes(box.value)));
  control(ui.moniker).value = query.get("moniker") || "";
  control(ui.status).value = query.get("status") || "";
  control(ui.agent).value = query.get("agent_id") || "";
  control(ui.since).value = query.get("since") ? toLocal(query.get("since")) : "";
  control(ui.until).value = query.get("until") ? toLocal(query.get("until")) : "";
}

function go(next) {
  for (const [key, value] of [...next.entries()]) if (!value) next.delete(key);
  location.hash = "#/search?" + next.toString();
}

// A filter changed: the address takes the form's values, back on page 1.
function applyFilters() {
  const next = new URLSearchParams(query);
  const kinds = [...ui.kinds.querySelectorAll("input:checked")].map((box) => box.value);
  next.set("kind", kinds.length === Object.keys(KIND_WORDS).length ? "" : kinds.join(","));
  next.set("moniker", control(ui.moniker).value);
  next.set("status", control(ui.status).value);
  next.set("agent_id", control(ui.agent).value.trim());
  next.set("since", fromLocal(control(ui.since).value));
  next.set("until", fromLocal(control(ui.until).value));
  next.delete("offset");
  go(next);
}

function clearFilters() {
  go(new URLSearchParams({ q: query.get("q") || "" }));
}

function onlyAgent(agentId) {
  const next = new URLSearchParams(query);
  next.set("agent_id", agentId);
  next.delete("offset");
  go(next);
}

function turn(direction) {
  const next = new URLSearchParams(query);
  const limit = Number(query.get("limit")) || PAGE;
  next.set("offset", String(Math.max(0, (Number(query.get("offset")) || 0) + direction * limit)));
  if (next.get("offset") === "0") next.delete("offset");
  go(next);
}

// ---- the results ------------------------------------------------------------------

async function run(params) {
  query = params;
  const mine = ++generation;
  const words = (query.get("q") || "").trim();
  showWords(words);
  showFilters();
  replace(ui.list);
  ui.empty.hidden = ui.evals.hidden = ui.pager.hidden = true;
  if (!words) {
    ui.meta.textContent = "Type words in the search box above: every step, message, tool call and summary is searched.";
    return;
  }
  ui.meta.textContent = `Searching for “${words}”…`;
  const asked = {};
  for (const key of FILTERS) if (query.get(key)) asked[key] = query.get(key);
  let result;
  try {
    result = await get("/api/search", asked);
  } catch (err) {
    if (mine === generation) ui.meta.textContent = "Search failed: " + err.message;
    return;
  }
  if (mine !== generation) return;
  const how = result.mode === "hybrid" ? "full text + semantic"
    : "full text" + (result.semantic ? ` (semantic: ${result.semantic})` : "");
  const offset = result.offset || 0;
  ui.meta.textContent = `${result.hits.length} result${result.hits.length === 1 ? "" : "s"}`
    + (offset || result.more ? ` on this page` : "") + ` for “${words}” · ${how}`;
  replace(ui.list, result.hits.map(hitNode));
  ui.empty.hidden = result.hits.length > 0;
  ui.pager.hidden = !offset && !result.more;
  ui.prev.disabled = !offset;
  ui.next.disabled = !result.more;
  ui.range.textContent = result.hits.length ? `results ${offset + 1}–${offset + result.hits.length}` : "";
  ui.evals.hidden = !result.hits.some((hit) => hit.session_id);  // the Evals page freezes the search's sessions
  ui.evals.firstChild.href = "#/evals?q=" + encodeURIComponent(words);
}

function hitNode(hit) {
  const who = hit.session_id ? (hit.agent_name || (hit.agent_id ? tag(hit.agent_id) : "session " + short(hit.session_id)))
    : null;
  const where = [
    hit.moniker,
    hit.iteration != null ? (hit.kind === "summary" ? "up to step " : "step ") + stepNumber(hit.iteration) : null,
    hit.conversation_id ? "conversation " + short(hit.conversation_id) : null,
    hit.name ? "tool " + hit.name : null,
  ].filter(Boolean).join(" · ");
  return h("li.hit." + hit.kind, { dataset: { testid: "search-hit", kind: hit.kind } },
    h("a.hit-link", { href: hit.link },
      h("span.badge.kind", KIND_WORDS[hit.kind] || hit.kind), " ",
      who ? h("strong.hit-agent", { title: hit.agent_id || "", dataset: { testid: "search-hit-agent" } }, who) : null,
      who && where ? " · " : " ", h("span.hit-where", where)),
    hit.created_at ? h("span.hint", " · ", when(hit.created_at)) : null,
    hit.agent_id && query.get("agent_id") !== hit.agent_id  // a filter, so a button: the hit has one link
      ? h("span.hint", " · ", h("button.only-agent", { type: "button", dataset: { testid: "search-only-agent" },
        title: `Only hits of ${who || "this agent"}`, style: { padding: "1px 8px", fontSize: "0.9em" },
        onclick: () => onlyAgent(hit.agent_id) },
      "only this agent")) : null,
    highlighted(hit.snippet || "", hit.highlights));
}

// The snippet as text, with each [start, end) span of a matched word in a <mark>.
function highlighted(text, spans) {
  const p = h("p.snippet");
  let at = 0;
  for (const [start, end] of spans || []) {
    if (start < at) continue;
    p.append(text.slice(at, start), h("mark", text.slice(start, end)));
    at = end;
  }
  p.append(text.slice(at));
  return p;
}

registerPage({
  name: "search",
  nav: { label: "Search", href: "#/search", order: 30 },
  match: (parts) => (parts[0] === "search" ? {} : null),
  mount,
  enter: (params) => run(params.query),
  rooms: () => [],
  catchUp: () => {},
});
