// The session page's "Record" panel: where a fork came from (a link to the step
// it continues), what a replay replayed (and a link to its diff against its
// source), and the session's summary (GET /api/summaries?session_id=…).
//
// A summary is written in the background once the session finishes, so it may
// land a moment after the finished status: while none is found for a finished
// session, it is asked for again a few times (1, 2, 4, 8 s), then the panel
// says there is none yet.  A status change to finished (again) asks again.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { short, stepNumber } from "../core/format.js";

const FINISHED = ["stopped", "done", "error"];
const RETRIES = [1000, 2000, 4000, 8000];

export function sessionRecord() {
  const title = h("h2", { id: "record-title", tabindex: "-1" }, "Record");
  const forked = h("p.forked-from", { hidden: true, dataset: { testid: "forked-from" } });
  const replayed = h("p.replayed-from", { hidden: true, dataset: { testid: "replayed-from" } });
  const summary = h("div.summary");
  const root = h("div.panel.record", { dataset: { testid: "session-record" }, "aria-labelledby": "record-title" },
    title, forked, replayed, summary);

  let sessionId = null;
  let asked = "";        // "status:iteration" the summary was last asked for
  let generation = 0;    // bumps on reset and on each new ask; older answers are dropped
  let timer = null;

  function reset(id) {
    sessionId = id;
    asked = "";
    generation += 1;
    clearTimeout(timer);
    forked.hidden = true;
    replayed.hidden = true;
    replace(summary, h("p.empty", "No summary yet: one is written when the session finishes."));
  }

  function drawForkedFrom(from) {
    forked.hidden = !from;
    if (!from) return;
    const at = stepNumber(from.iteration);
    replace(forked, "Forked from ",
      h("a", { href: `#/session/${from.session_id}?iteration=${from.iteration}` },
        `session ${short(from.session_id)} at step ${at}`),
      `: its steps 1–${at} are read there; this session's own steps start at ${at + 1}.`);
  }

  // A replay: where from, how it ended against its recording, and the diff (a fork links to its diff too).
  function drawReplayedFrom(snapshot) {
    const from = snapshot.replayed_from || snapshot.forked_from;
    replayed.hidden = !from;
    if (!from) return;
    const diff = h("a", { href: `#/diff/${snapshot.session_id}?against=${from.session_id}`,
      dataset: { testid: "diff-source" } }, "Diff against source");
    const spec = snapshot.replay || {};
    if (!snapshot.replayed_from) return replace(replayed, diff);
    replace(replayed, `Replay of session ${short(from.session_id)} from step ${stepNumber(from.from_iteration)}`,
      spec.tools ? ` (tools ${spec.tools})` : "",
      spec.diverged_at != null ? `; diverged at step ${stepNumber(spec.diverged_at)}: ${spec.divergence || ""}` : "",
      ". ", diff);
  }

  function drawSummary(row) {
    const how = row.method === "llm" ? "written by the session's model" : "extractive";
    replace(summary, h("div", { dataset: { testid: "session-summary" } },
      h("h3", "Summary ", h("small", `(${how})`)), h("pre.summary-text", row.text || "")));
  }

  async function ask(mine, attempt) {
    let rows = [];
    try {
      rows = (await get("/api/summaries", { session_id: sessionId, limit: 1 })).summaries;
    } catch (err) {
      rows = [];  // said below as "none yet"; a later status change asks again
    }
    if (mine !== generation) return;
    if (rows.length) return drawSummary(rows[0]);
    if (attempt < RETRIES.length) timer = setTimeout(() => ask(mine, attempt + 1), RETRIES[attempt]);
    else replace(summary, h("p.empty", "No summary yet for this finished session."));
  }

  // Each snapshot of the session (first load and live): draw what changed.
  function update(snapshot) {
    if (snapshot.session_id !== sessionId) return;
    drawForkedFrom(snapshot.forked_from);
    drawReplayedFrom(snapshot);
    const key = `${snapshot.status}:${snapshot.iteration}`;
    if (!FINISHED.includes(snapshot.status) || key === asked) return;
    asked = key;
    clearTimeout(timer);
    generation += 1;
    ask(generation, 0);
  }

  return { root, reset, update, focus: () => { root.scrollIntoView({ block: "start" }); title.focus(); } };
}
