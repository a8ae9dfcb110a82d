// Two sessions of one lineage side by side (GET /api/sessions/ID/diff?against=ID):
// "#/diff/ID?against=OTHER".  The against session (the recording, the source) is
// the left column, the session (the replay, the fork) the right one; a row per
// step, paired by iteration.  Rows whose text, tool calls or status differ are
// marked, the first of them is highlighted and scrolled to.  A row's state
// changes (what turns the left state into the right one) open on demand.
// Live: while either session runs, its new steps redraw the diff (at most once
// a second).
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { badge, money, short, stepNumber, tokens } from "../core/format.js";
import { registerPage } from "../core/registry.js";

const WHAT = { text: "text", tool_calls: "tool calls", status: "status", step: "only one took this step" };

let ui = null;
let current = { id: null, against: null, from: null };
let generation = 0;
let timer = null;
let running = false;

function mount(section) {
  ui = {
    back: h("a.back", { href: "#/" }, "← session"),
    title: h("h1", { id: "diff-title", tabindex: "-1" }, "Diff"),
    meta: h("p.hint", { role: "status", dataset: { testid: "diff-meta" } }),
    sides: h("div.diff-sides"),
    first: h("div", { dataset: { testid: "diff-first" } }),
    table: h("div.table-wrap"),
    more: h("p"),
  };
  replace(section, ui.back, h("div.panel", ui.title, ui.meta, ui.sides, ui.first, ui.table, ui.more));
}

async function load(params, { scroll = true } = {}) {
  const against = params.query.get("against") || "";
  const from = params.query.get("from_iteration");
  current = { id: params.id, against, from };
  const mine = ++generation;
  ui.back.href = "#/session/" + encodeURIComponent(params.id);
  if (!against) {
    replace(ui.meta, "Say which session to compare against: #/diff/ID?against=OTHER_ID.");
    return;
  }
  let out;
  try {
    out = await get(`/api/sessions/${encodeURIComponent(params.id)}/diff`,
      { against, from_iteration: from });
  } catch (err) {
    if (mine !== generation) return;
    replace(ui.meta, h("span.error-sentence", "Could not compare: " + err.message));
    replace(ui.sides); replace(ui.first); replace(ui.table); replace(ui.more);
    return;
  }
  if (mine !== generation) return;
  running = out.summary.unfinished.length > 0;
  draw(out, scroll);
}

function draw(out, scroll) {
  replace(ui.title, "Diff: ", sideName(out.b), " against ", sideName(out.a));
  const s = out.summary;
  const range = out.iterations.length
    ? `steps ${stepNumber(out.iterations[0].iteration)}–${stepNumber(out.iterations.at(-1).iteration)}` : "no steps";
  replace(ui.meta, `${relationWords(out.lineage)}. Compared ${s.compared} steps (${range}); ${s.differing} differ`,
    s.shared_before ? `; ${s.shared_before} earlier steps are shared history` : "",
    s.truncated ? `; cut at ${s.limit} steps.` : ".",
    running ? " Still running: new steps are added as they come." : "");
  replace(ui.sides, sideFacts("against", out.a), sideFacts("session", out.b));
  drawFirst(out.first_divergence);
  replace(ui.table, table(out));
  drawMore(out);
  const first = out.first_divergence && document.getElementById(rowId(out.first_divergence.iteration));
  if (scroll && first) {
    first.scrollIntoView({ block: "center" });
    first.querySelector("th").focus({ preventScroll: true });
  }
}

// A side as people know it: its name, else its agent's tag, with the session's short id after.
function sideName(side) {
  return side.name ? `${side.name} (${short(side.session_id)})` : `session ${short(side.session_id)}`;
}

function relationWords(lineage) {
  const c = short(lineage.common);
  return { descends: `This session descends from ${c}`, ancestor: `${c} descends from the other`,
    siblings: `Both come from ${c}`, same: "The same session" }[lineage.relation] || lineage.relation;
}

function sideFacts(role, side) {
  const link = h("a", { href: "#/session/" + encodeURIComponent(side.session_id) }, sideName(side));
  const label = role === "against" ? "the session compared against" : "this session";
  return h("section.diff-side", { "aria-label": label, dataset: { testid: "diff-side-" + role } },
    h("h2", role === "against" ? "Against " : "Session ", link, " ", badge(side.status)),
    h("dl.facts",
      fact("reason", side.status_reason || "—"), fact("steps compared", String(side.steps)),
      fact("tokens", tokens(side.tokens)), fact("cost", money(side.cost)), fact("errors", String(side.errors))),
    h("p", h("small", "last text: "), side.final_text == null ? "—" : clip(side.final_text, 300)));
}

const fact = (term, value) => h("div", h("dt", term), h("dd", value));

function drawFirst(first) {
  if (!first) {
    replace(ui.first, h("p.notice.ok-notice", "No divergence: every step compared has the same text, tool calls and "
      + "status."));
    return;
  }
  replace(ui.first, h("div.notice.warn",
    h("p", h("strong", `First divergence at step ${stepNumber(first.iteration)}`), ` (${whatWords(first.what)}): `,
      first.detail),
    h("p", h("a", { href: "#" + rowId(first.iteration), onclick: (e) => {
      e.preventDefault();
      const row = document.getElementById(rowId(first.iteration));
      row.scrollIntoView({ block: "center" });
      row.querySelector("th").focus({ preventScroll: true });
    } }, "Show it"))));
}

const whatWords = (what) => what.map((w) => WHAT[w] || w).join(", ");
const rowId = (iteration) => "diff-step-" + iteration;

function table(out) {
  const firstAt = out.first_divergence ? out.first_divergence.iteration : null;
  return h("table.list.diff", { dataset: { testid: "diff-table" } },
    h("caption.visually-hidden", "Steps of both sessions side by side"),
    h("thead", h("tr", h("th", { scope: "col" }, "Step"),
      h("th", { scope: "col" }, "Against ", short(out.against)),
      h("th", { scope: "col" }, "Session ", short(out.session_id)))),
    h("tbody", out.iterations.map((row) => diffRow(row, row.iteration === firstAt, labels(out)))));
}

const labels = (out) => ["Against " + short(out.against), "Session " + short(out.session_id)];

function diffRow(row, first, [labelA, labelB]) {
  const differs = row.differs.length > 0;
  return h("tr", { id: rowId(row.iteration), class: [differs ? "differs" : "", first ? "first" : ""].join(" ").trim(),
    dataset: { testid: "diff-row", iteration: String(row.iteration), differs: differs ? "true" : "false" } },
  h("th", { scope: "row", tabindex: "-1" }, `step ${stepNumber(row.iteration)}`,
    differs ? h("small.diff-what", whatWords(row.differs)) : null),
  h("td", { dataset: { testid: "diff-a", label: labelA } }, sideCell(row.a, row.differs)),
  h("td", { dataset: { testid: "diff-b", label: labelB } }, sideCell(row.b, row.differs), stateChanges(row.state)));
}

function sideCell(side, differs) {
  if (!side) return h("p.empty", "no step");
  const mark = (what) => (differs.includes(what) ? "diff-mark" : null);
  return [
    h("div.step-head", h("span", { class: mark("status") }, badge(side.status)),
      ` ${tokens(side.tokens)} tokens · ${money(side.cost)}`),
    h("div.step-text", { class: mark("text") }, side.text == null ? "" : side.text),
    side.error ? h("div.step-error.error-sentence", clip(side.error, 300)) : null,
    side.tool_calls.length ? h("ul.diff-calls", { class: mark("tool_calls") },
      side.tool_calls.map((c) => h("li", h("code", `${c.name}(${clip(JSON.stringify(c.args), 200)})`), " ",
        c.status ? badge(c.status) : null))) : null,
  ];
}

function stateChanges(ops) {
  if (!ops || !ops.length) return null;
  const details = h("details.json.diff-state", { dataset: { testid: "diff-state" } },
    h("summary", `state: ${ops.length} change${ops.length === 1 ? "" : "s"} from the left`));
  details.addEventListener("toggle", () => {
    if (!details.open || details.childElementCount > 1) return;
    details.appendChild(h("ul.plain", ops.map((op) => h("li", h("code", op.path || "/"), " ", op.op,
      op.op === "add" ? null : [" ", h("code", clip(JSON.stringify(op.before), 200))],
      op.op === "remove" ? null : [" → ", h("code", clip(JSON.stringify(op.after), 200))]))));
  });
  return details;
}

function drawMore(out) {
  if (!out.summary.truncated || !out.iterations.length) return replace(ui.more);
  const next = out.iterations.at(-1).iteration + 1;
  const href = `#/diff/${encodeURIComponent(out.session_id)}?against=${encodeURIComponent(out.against)}`
    + `&from_iteration=${next}`;
  replace(ui.more, h("a", { href }, `Compare from step ${stepNumber(next)} on`));
}

const clip = (text, n) => (String(text).length > n ? String(text).slice(0, n) + "…" : String(text));

// A new step of either session: read the diff again, at most once a second, without scrolling.
function changed(data) {
  if (!running || ![current.id, current.against].includes(data.session_id)) return;
  clearTimeout(timer);
  const params = { id: current.id, query: new URLSearchParams({ against: current.against,
    ...(current.from ? { from_iteration: current.from } : {}) }) };
  timer = setTimeout(() => load(params, { scroll: false }), 1000);
}

registerPage({
  name: "diff",
  match: (parts) => (parts[0] === "diff" && parts[1] ? { id: parts[1] } : null),
  mount,
  enter: (params) => load(params),
  rooms: (params) => [params.id, params.query.get("against")].filter(Boolean).map((id) => "session:" + id),
  catchUp: () => {},
  on: { agent_step: changed, agent_state: changed },
});
