// What a profile's observers and flow rules did at each step (docs/profiles.md):
// one line inside the step, from the step row's `observers` column — which
// observers fired and how (a note, pause, stop, asking the user), which failed
// (with the error: a failing observer is skipped, never stops the session),
// and the flow decision after a step with neither tool calls nor done.
// Steps of sessions without a profile have no such column: nothing is drawn.
import { h } from "../core/dom.js";
import { registerStepPart } from "../core/registry.js";

const VERB = { note: "added a note", pause: "paused the session", stop: "stopped the session",
               ask_user: "asked the user" };
const FLOW = { continue: "continue", wait_user: "wait for the user", end_turn: "end the turn" };

function outcome(o) {
  if (o.error) return h("li.observer.failed", { dataset: { testid: "observer-failed" }, title: o.error },
    `${o.name} (${o.when === "before_step" ? "before" : "after"}) failed and was skipped: ${o.error}`);
  if (!o.fired) return null;
  return h("li.observer.fired", { dataset: { testid: "observer-fired" }, title: o.text || "" },
    `${o.name} ${VERB[o.action] || o.action}` + (o.text ? `: ${o.text}` : ""));
}

registerStepPart((step) => {
  const record = step.observers;
  if (!record || typeof record !== "object") return null;
  const items = [...(record.before || []), ...(record.after || [])].map(outcome).filter(Boolean);
  if (record.flow && record.flow.decision !== "continue") {
    items.push(h("li.observer.flow", { dataset: { testid: "flow-decision" } },
      `flow: ${FLOW[record.flow.decision] || record.flow.decision}`));
  }
  if (!items.length) return null;
  return h("ul.observers", { dataset: { testid: "observers" }, "aria-label": "observers and flow" }, items);
});
