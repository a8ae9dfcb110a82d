// Eval sets and their runs (GET /api/evalsets, GET /api/evalsets/ID/runs).
//   "#/evals"      the sets, and a form for a new one (prefilled by ?session_ids= or ?q=)
//   "#/evals/ID"   one set: a form to start a run, and its runs side by side: mean
//                  and median per scorer, and per session each run's scores, marked
//                  better or worse than the run before, with a link to the diff of
//                  each replay against its recording.
// Runs are driven by the agents service; while one is running the page reads
// the set again every few seconds.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { badge, short, when } from "../core/format.js";
import { registerPage } from "../core/registry.js";
import { toast } from "../core/toast.js";
import { evalRunForm, evalSetForm } from "../components/eval_forms.js";

const POLL_MS = 3000;

let ui = null;
let generation = 0;
let timer = null;

function mount(section) {
  ui = { section };
}

async function enter(params) {
  clearTimeout(timer);
  const mine = ++generation;
  if (params.id) return showSet(params.id, mine);
  return showSets(params.query, mine);
}

// ---- the list of sets ------------------------------------------------------------

async function showSets(query, mine) {
  const list = h("div", h("p.empty", "Loading…"));
  const form = evalSetForm((made) => {
    toast("Eval set created: " + made.name);
    location.hash = "#/evals/" + made.id;
  });
  form.fill(query);
  replace(ui.section, h("div.columns",
    h("div.panel.grow", h("h1", { id: "evals-title", tabindex: "-1" }, "Eval sets"), list),
    h("div.panel.side", form.root)));
  let sets;
  try {
    sets = (await get("/api/evalsets", { limit: 200 })).evalsets;
  } catch (err) {
    return replace(list, h("p.error-sentence", "Could not read the eval sets: " + err.message));
  }
  if (mine !== generation) return;
  if (!sets.length) return replace(list, h("p.empty", "No eval sets yet: make one from sessions or a search."));
  replace(list, h("table.list", { dataset: { testid: "evalsets" } },
    h("thead", h("tr", ["Name", "Sessions", "From step", "Created"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", sets.map((s) => h("tr", { dataset: { testid: "evalset-row" } },
      h("td", h("a", { href: "#/evals/" + encodeURIComponent(s.id) }, s.name)),
      h("td", String(s.session_ids.length)), h("td", String(s.from_iteration + 1)), h("td", when(s.created_at)))))));
}

// ---- one set: its runs compared ------------------------------------------------------

async function showSet(id, mine) {
  let data;
  try {
    data = await get(`/api/evalsets/${encodeURIComponent(id)}/runs`);
  } catch (err) {
    if (mine === generation) replace(ui.section, h("a.back", { href: "#/evals" }, "← eval sets"),
      h("div.panel", h("p.error-sentence", "Could not read the eval set: " + err.message)));
    return;
  }
  if (mine !== generation) return;
  drawSet(data);
  if (data.runs.some((r) => r.status === "running")) {
    const shown = () => mine === generation && location.hash.startsWith("#/evals/");
    timer = setTimeout(() => shown() && showSet(id, mine), POLL_MS);
  }
}

function drawSet(data) {
  const set = data.evalset;
  const keep = ui.runForm && ui.runForm.id === set.id ? ui.runForm : { id: set.id, ...evalRunForm(set.id, () => {
    toast("Run started");
    clearTimeout(timer);
    showSet(set.id, ++generation);
  }) };
  ui.runForm = keep;
  replace(ui.section, h("a.back", { href: "#/evals" }, "← eval sets"),
    h("div.columns",
      h("div.grow",
        h("div.panel", h("h1", { id: "evalset-title", tabindex: "-1" }, "Eval set ", set.name),
          h("p.hint", `${set.session_ids.length} sessions, replayed from step ${set.from_iteration + 1}; `
            + `${data.runs.length} run${data.runs.length === 1 ? "" : "s"}.`),
          data.runs.length ? summaryTable(data.runs) : h("p.empty", "No runs yet: start one.")),
        data.runs.length ? h("div.panel", h("h2", "Sessions"), sessionTable(data)) : null),
      h("div.panel.side", keep.root)));
}

const runLabel = (run, i) => `run ${i + 1}`;

function overrides(run) {
  const r = run.request || {};
  const parts = [r.moniker && `moniker ${r.moniker}`, r.profile && `profile ${r.profile}`,
    r.config && Object.keys(r.config).length && `config ${clip(JSON.stringify(r.config), 120)}`,
    `tools ${r.tools || "recorded"}`].filter(Boolean);
  return parts.join(" · ");
}

function summaryTable(runs) {
  const scorers = [...new Set(runs.flatMap((r) => r.scorers))];
  return h("div.table-wrap", h("table.list.eval-summary", { dataset: { testid: "eval-summary" } },
    h("caption.visually-hidden", "Mean and median per scorer, per run"),
    h("thead", h("tr", h("th", { scope: "col" }, "Scorer"), runs.map((run, i) => h("th", { scope: "col" },
      runLabel(run, i), " ", badge(run.status), h("small", { class: "run-what" }, overrides(run)),
      h("small", progress(run)))))),
    h("tbody", scorers.map((name) => h("tr", { dataset: { testid: "eval-scorer", scorer: name } },
      h("th", { scope: "row" }, name),
      runs.map((run, i) => h("td", { dataset: { label: runLabel(run, i) } }, stat(run.summary[name]))))))));
}

function progress(run) {
  const p = run.progress || {};
  return `${p.scored || 0} scored, ${p.failed || 0} failed, ${(p.pending || 0) + (p.enqueued || 0)} to go`;
}

function stat(summary) {
  if (!summary) return "—";
  const judged = (summary.passed || 0) + (summary.failed || 0);
  const passed = judged ? `passed ${summary.passed} of ${judged}` : null;
  if (!summary.n) return passed ? h("span", { dataset: { testid: "eval-mean" } }, "no values", h("small", passed)) : "—";
  return h("span", { dataset: { testid: "eval-mean" } }, `mean ${num(summary.mean)}`,
    h("small", `median ${num(summary.median)} · n ${summary.n}`), passed ? h("small", passed) : null);
}

const clip = (text, n) => (text.length > n ? text.slice(0, n) + "…" : text);

const num = (x) => (x == null ? "—" : Number.isInteger(x) ? String(x) : Number(x).toFixed(3));

function sessionTable(data) {
  const { runs, sessions } = data;
  const changes = {};  // run id -> session id -> {scorer: better|worse}
  for (const c of data.comparisons || []) changes[c.to_run] = c.changes || {};
  const marks = new Map();  // "run:session" -> "better" | "worse"
  for (const c of data.comparisons || []) {
    c.better.forEach((sid) => marks.set(`${c.to_run}:${sid}`, "better"));
    c.worse.forEach((sid) => marks.set(`${c.to_run}:${sid}`, "worse"));
  }
  return h("div.table-wrap", h("table.list.eval-sessions", { dataset: { testid: "eval-sessions" } },
    h("caption.visually-hidden", "Each session's scores per run"),
    h("thead", h("tr", h("th", { scope: "col" }, "Session"),
      runs.map((run, i) => h("th", { scope: "col" }, runLabel(run, i))))),
    h("tbody", sessions.map((s) => h("tr", { dataset: { testid: "eval-session", session: s.session_id } },
      h("th", { scope: "row" }, h("a", { href: "#/session/" + encodeURIComponent(s.session_id) },
        s.name || short(s.session_id))),
      runs.map((run, i) => resultCell(s, run, runLabel(run, i), marks.get(`${run.id}:${s.session_id}`),
        (changes[run.id] || {})[s.session_id] || {})))))));
}

function resultCell(session, run, label, mark, moved) {
  const result = session.runs[run.id];
  if (!result) return h("td", { dataset: { label } }, "—");
  const scores = Object.entries(result.scores || {});
  return h("td", { class: mark ? "eval-" + mark : null,
    dataset: { testid: "eval-result", mark: mark || "", label } },
    mark ? h("strong.eval-mark", mark === "better" ? "▲ better" : "▼ worse") : null,
    h("div", badge(result.replay_status || result.status), " ",
      h("a", { href: `#/diff/${encodeURIComponent(result.replay_session_id)}?against=`
        + encodeURIComponent(session.session_id), dataset: { testid: "eval-diff" } }, "diff")),
    scores.length ? h("ul.eval-scores", scores.map(([name, value]) => h("li", `${name}: ${num(value)}`,
      moved[name] ? h("span", { class: "eval-" + moved[name] }, moved[name] === "better" ? " ▲" : " ▼") : null,
      (result.passed || {})[name] === false ? h("small", " failed") : null))) : null);
}

registerPage({
  name: "evals",
  nav: { label: "Evals", href: "#/evals", order: 35 },
  match: (parts) => (parts[0] === "evals" ? { id: parts[1] || null } : null),
  mount,
  enter,
  rooms: () => [],
  catchUp: () => {},
});
