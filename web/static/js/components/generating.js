// The step a session is generating right now, shown under the timeline's head
// while its model writes: the step's number, the model output so far
// (monospace, kept scrolled to its end unless you scrolled up to read), the
// tokens so far and the structured-output mode.
//
// It is drawn from "step_delta" live events only.  They are never stored, so
// nothing is read back over HTTP: a page opened in the middle of a step shows
// the output from the next delta on.  The area goes away when the step it
// previews (or a later one) arrives, when the session is no longer running or
// waiting, or when no delta came for 30 s (the worker stopped, or the relay
// dropped them); the step itself is the record.
//
// Screen readers hear the summary line ("Generating step 4…"), which changes
// once per step or attempt, not the text, which changes ten times a second.
import { h } from "../core/dom.js";
import { stepNumber, tokens } from "../core/format.js";

const QUIET_MS = 30_000;
const LIVE_STATUSES = ["running", "waiting"];
const MODES = { json_schema: "JSON schema", grammar: "grammar (compact JSON)", json_object: "JSON object",
                off: "none (free text)" };
const DOING = { DecideNextMove: "deciding the next move", SummarizeRecord: "summarizing" };
const STUCK_TO_END_PX = 24;  // this close to the end counts as "reading the newest"

export function generating() {
  const summary = h("p.generating-summary", { role: "status", "aria-live": "polite",
    dataset: { testid: "generating-summary" } });
  const count = h("span", { dataset: { testid: "generating-tokens" } });
  const mode = h("span", { dataset: { testid: "generating-mode" } });
  const meta = h("p.generating-meta", count, " tokens so far · structured output: ", mode);
  const text = h("pre.generating-text", { tabindex: "0", "aria-label": "Model output so far",
    dataset: { testid: "generating-text" } });
  const root = h("section.generating", { hidden: true, "aria-label": "The step being generated",
    dataset: { testid: "generating" } }, summary, meta, text);

  let sessionId = null;
  let status = null;   // the session's, from its snapshot
  let stepped = -1;    // the highest iteration recorded: deltas up to it are over
  let shown = null;    // the delta on screen
  let quiet = null;    // the 30 s timer

  function reset(id) {
    sessionId = id;
    status = null;
    stepped = -1;
    hide();
  }

  function hide() {
    shown = null;
    root.hidden = true;
    clearTimeout(quiet);
    summary.textContent = "";
    text.textContent = "";
  }

  function onDelta(d) {
    if (d.session_id !== sessionId || d.iteration <= stepped) return;
    if (status !== null && !LIVE_STATUSES.includes(status)) return;
    const sameAttempt = shown && ["iteration", "function", "ask", "attempt"].every((k) => shown[k] === d[k]);
    const atEnd = !sameAttempt || text.scrollHeight - text.scrollTop - text.clientHeight < STUCK_TO_END_PX;
    shown = d;
    root.hidden = false;
    const line = summaryOf(d);
    if (summary.textContent !== line) summary.textContent = line;  // unchanged text is not announced again
    count.textContent = tokens(d.tokens || 0);
    mode.textContent = MODES[d.mode] || d.mode || "—";
    text.textContent = d.text || "";
    if (atEnd) text.scrollTop = text.scrollHeight;
    clearTimeout(quiet);
    quiet = setTimeout(hide, QUIET_MS);
  }

  // A step of this session was recorded (a live one, or the snapshot's latest).
  function onStep(step) {
    if (step.session_id !== sessionId) return;
    stepped = Math.max(stepped, step.iteration);
    if (shown && shown.iteration <= step.iteration) hide();
  }

  function setSession(s) {
    if (s.session_id !== sessionId) return;
    status = s.status;
    if (typeof s.iteration === "number") onStep(s);
    if (!LIVE_STATUSES.includes(status)) hide();
  }

  return { root, reset, onDelta, onStep, setSession };
}

function summaryOf(d) {
  const doing = DOING[d.function] ? `: ${DOING[d.function]}` : "";
  const tries = [d.ask > 0 ? `re-ask ${d.ask}` : "", d.attempt > 1 ? `attempt ${d.attempt}` : ""]
    .filter(Boolean).join(", ");
  // A final delta ends an attempt, whether it worked (the step follows) or not (another attempt may).
  if (d.final) return `Step ${stepNumber(d.iteration)}${doing}: generation ended` + (tries ? ` (${tries})` : "");
  return `Generating step ${stepNumber(d.iteration)}${doing}…` + (tries ? ` (${tries})` : "");
}
