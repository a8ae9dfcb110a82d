// "Fork from here" on every step of a session's timeline: a new session of the
// same agent that continues from this step's state (POST /api/sessions/ID/fork),
// optionally with guidance for its first step.  The original is never changed.
// Once the fork is accepted the page opens it; it shows "pending" until a
// worker applies the create, then runs live like any session.
import { post } from "../core/api.js";
import { h } from "../core/dom.js";
import { short, stepNumber } from "../core/format.js";
import { registerStepPart } from "../core/registry.js";
import { toast } from "../core/toast.js";

async function fork(step) {
  const guidance = window.prompt(`Fork from step ${stepNumber(step.iteration)}: guidance for the fork's first step `
    + "(optional):", "");
  if (guidance === null) return;  // cancelled
  const body = { from_iteration: step.iteration };
  if (guidance.trim()) body.guidance = guidance.trim();
  try {
    const made = await post(`/api/sessions/${encodeURIComponent(step.session_id)}/fork`, body);
    toast("Fork accepted: session " + short(made.session_id));
    location.hash = "#/session/" + made.session_id;
  } catch (err) {
    toast("Could not fork: " + err.message, true);
  }
}

registerStepPart((step) => h("div.step-actions",
  h("button.fork-here", { type: "button", dataset: { testid: "fork-here" },
    "aria-label": `Fork from here (step ${stepNumber(step.iteration)})`,
    title: "Start a new session of this agent that continues from this step",
    onclick: () => fork(step) }, "Fork from here")));
