// The search page (#/search?q=words&kind=…): full-text (and, when the service has
// embeddings, semantic) search over steps, messages, tool calls and summaries
// (GET /api/search).  Each result links to the exact row: the session page
// scrolled to its step (and tool call), or the conversation at its message.
// Matched words are <mark>ed from the API's highlight offsets; the record's text
// only ever becomes text nodes, never HTML.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { short, stepNumber, when } from "../core/format.js";
import { registerPage } from "../core/registry.js";
import { showWords } from "../components/search_box.js";

// The hash's query keys passed on to the API (the rest are ignored).
const FILTERS = ["q", "kind", "agent_id", "session_id", "conversation_id", "status", "since", "until", "moniker",
  "limit", "mode"];
const KIND_WORDS = { step: "step", message: "message", tool_call: "tool call", summary: "summary" };

let ui = null;
let generation = 0;  // answers to an older search are dropped

function mount(section) {
  ui = {
    title: h("h2", { id: "search-title", tabindex: "-1" }, "Search"),
    meta: h("p.hint", { role: "status", dataset: { testid: "search-meta" } }),
    list: h("ol.search-results", { dataset: { testid: "search-results" }, "aria-labelledby": "search-title" }),
    empty: h("p.empty", { hidden: true }, "Nothing found. Try other words, or fewer of them."),
    evals: h("p.hint", { hidden: true }, h("a", { dataset: { testid: "search-evalset" } },
      "Replay and score the sessions found: make an eval set of them")),
  };
  replace(section, h("div.panel", ui.title, ui.meta, ui.list, ui.empty, ui.evals));
}

async function run(query) {
  const mine = ++generation;
  const words = (query.get("q") || "").trim();
  showWords(words);
  replace(ui.list);
  ui.empty.hidden = ui.evals.hidden = true;
  if (!words) {
    ui.meta.textContent = "Type words in the search box above: every step, message, tool call and summary is searched.";
    return;
  }
  ui.meta.textContent = `Searching for “${words}”…`;
  const params = {};
  for (const key of FILTERS) if (query.get(key)) params[key] = query.get(key);
  let result;
  try {
    result = await get("/api/search", params);
  } catch (err) {
    if (mine === generation) ui.meta.textContent = "Search failed: " + err.message;
    return;
  }
  if (mine !== generation) return;
  const how = result.mode === "hybrid" ? "full text + semantic"
    : "full text" + (result.semantic ? ` (semantic: ${result.semantic})` : "");
  ui.meta.textContent = `${result.hits.length} result${result.hits.length === 1 ? "" : "s"} for “${words}” · ${how}`;
  replace(ui.list, result.hits.map(hitNode));
  ui.empty.hidden = result.hits.length > 0;
  ui.evals.hidden = !result.hits.some((hit) => hit.session_id);  // the Evals page freezes the search's sessions
  ui.evals.firstChild.href = "#/evals?q=" + encodeURIComponent(words);
}

function hitNode(hit) {
  const where = [
    hit.session_id ? "session " + short(hit.session_id) : null,
    hit.iteration != null ? (hit.kind === "summary" ? "up to step " : "step ") + stepNumber(hit.iteration) : null,
    hit.conversation_id ? "conversation " + short(hit.conversation_id) : null,
    hit.name ? "tool " + hit.name : null,
  ].filter(Boolean).join(" · ");
  return h("li.hit." + hit.kind, { dataset: { testid: "search-hit", kind: hit.kind } },
    h("a.hit-link", { href: hit.link },
      h("span.badge.kind", KIND_WORDS[hit.kind] || hit.kind), " ", h("span.hit-where", where)),
    hit.created_at ? h("span.hint", " · ", when(hit.created_at)) : null,
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
