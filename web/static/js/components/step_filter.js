// Step filters above a session's timeline: show only its errors, the steps
// that asked for tool calls, the steps handed a person's guidance, the steps
// cut off by a dying worker, or the steps with a model-call attempt that ended
// a given way (GET /api/agent-steps?only=...&attempt_outcome=...; what each
// means is in store/step_filters.py).  While one is on, this list stands in
// for the timeline: the matching steps, newest first, a page at a time, with
// how many match and a way back to all steps.  A step of it is a link into the
// full timeline (the same ?iteration=N link Go to step makes).
//
// Live steps are not matched here (a step event leaves fields out for their
// size, domain/events.py, so it cannot always be judged): the list says that
// steps came since it was read, and Refresh reads it again.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { stepNumber, when } from "../core/format.js";

const PAGE = 50;
const ONLY = [
  ["", "All steps"],
  ["errors", "Errors"],
  ["tool_calls", "Tool calls"],
  ["guided", "Given guidance"],
  ["interrupted", "Interrupted (worker died)"],
];
const OUTCOMES = [
  ["", "Any"],
  ["timeout", "timeout"], ["5xx", "5xx"], ["429", "429"], ["unparseable", "unparseable"],
  ["cancelled", "cancelled"], ["unreachable", "unreachable"], ["error", "error"], ["truncated", "truncated"],
  ["ok", "ok"],
];

// `onChange(on)`: the filter was turned on or off (the page hides or shows the timeline);
// `linkTo(iteration)`: the address of a step in the full timeline; `goTo(iteration)`:
// show it there (the filter is turned off first, so the timeline is in view).
export function stepFilter({ onChange, linkTo, goTo }) {
  const select = (id, label, options, testid) => {
    const node = h("select", { id, dataset: { testid }, onchange: () => apply() },
      options.map(([value, text]) => h("option", { value }, text)));
    return [h("label", { for: id }, label), node];
  };
  const [onlyLabel, only] = select("step-filter-only", "Show", ONLY, "step-filter");
  const [outcomeLabel, outcome] = select("step-filter-outcome", "Model attempt", OUTCOMES, "step-filter-outcome");
  const controls = h("div.step-filter", { role: "group", "aria-label": "Step filters" },
    onlyLabel, only, outcomeLabel, outcome);

  const summary = h("p.filter-summary", { dataset: { testid: "filter-summary" }, "aria-live": "polite" });
  const showAll = h("button", { type: "button", dataset: { testid: "filter-show-all" }, onclick: () => clear() },
    "Show all steps");
  const stale = h("p.hint", { hidden: true, dataset: { testid: "filter-stale" } },
    "Steps have come since this list was read. ",
    h("button", { type: "button", dataset: { testid: "filter-refresh" }, onclick: () => read(true) }, "Refresh"));
  const list = h("ol.timeline.filtered", { dataset: { testid: "filtered-steps" }, "aria-label": "Matching steps, newest first" });
  const more = h("button", { type: "button", hidden: true, dataset: { testid: "filter-more" }, onclick: () => read(false) },
    "Load more");
  const results = h("div.filter-results", { hidden: true }, h("div.filter-head", summary, showAll), stale, list, more);

  let sessionId = null;
  let generation = 0;  // bumps on every new read from the top, so an old answer is dropped
  let offset = 0;
  let matched = 0;

  const params = () => ({ only: only.value || undefined, attempt_outcome: outcome.value || undefined });
  const active = () => Boolean(only.value || outcome.value);

  function describe() {
    const what = [only.value ? only.selectedOptions[0].textContent.toLowerCase() : null,
      outcome.value ? `a model attempt ended ${outcome.value}` : null].filter(Boolean).join(", ");
    const shown = list.children.length;
    summary.textContent = `Showing ${shown < matched ? `${shown} of ` : ""}${matched} matching step${matched === 1 ? "" : "s"}`
      + ` (${what}), newest first`;
    more.hidden = shown >= matched;
  }

  function item(step) {
    const excerpt = step.error || step.text || "";
    return h("li.step.filtered-step." + step.status, { dataset: { iteration: step.iteration, testid: "filtered-step" } },
      h("a", { href: linkTo(step.iteration), dataset: { testid: "filtered-step-link" },
        onclick: (event) => {
          if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;  // a new tab
          event.preventDefault();
          clear();
          goTo(step.iteration);
        } },
        h("strong", `Step ${stepNumber(step.iteration)}`)),
      " · ", when(step.created_at),
      step.status !== "ok" ? h("span.step-status", " · " + step.status) : null,
      step.tool_calls && step.tool_calls.length
        ? ` · ${step.tool_calls.length} tool call${step.tool_calls.length > 1 ? "s" : ""}` : null,
      excerpt ? h("div.step-text", excerpt.length > 200 ? excerpt.slice(0, 200) + "…" : excerpt) : null);
  }

  // Read the first page (fresh: the list starts again) or the next one.
  async function read(fresh) {
    if (!sessionId || !active()) return;
    if (fresh) {
      generation += 1;
      offset = 0;
      replace(list);
      stale.hidden = true;
      summary.textContent = "Reading the matching steps…";
      more.hidden = true;
    }
    const mine = generation;
    let page;
    try {
      page = await get("/api/agent-steps", { session_id: sessionId, order: "desc", limit: PAGE, offset, ...params() });
    } catch (err) {
      if (mine === generation) summary.textContent = "Could not read the matching steps: " + err.message;
      return;
    }
    if (mine !== generation) return;
    page.steps.forEach((s) => list.append(item(s)));
    offset += page.steps.length;
    matched = page.matched ?? offset;
    describe();
  }

  function apply() {
    const on = active();
    results.hidden = !on;
    onChange(on);
    if (on) read(true);
    else { generation += 1; replace(list); }
  }

  function clear() {
    only.value = "";
    outcome.value = "";
    apply();
  }

  return {
    controls,
    results,
    get active() { return active(); },
    reset(id) {
      sessionId = id;
      if (active()) clear();
    },
    clear,
    // A live step of this session: the list may miss it now.
    onStep(step) {
      if (step.session_id === sessionId && active()) stale.hidden = false;
    },
  };
}
