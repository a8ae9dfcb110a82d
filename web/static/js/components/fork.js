// "Fork from here" on every step of a session's timeline: a dialog that makes a
// new session of the same agent continuing from this step (POST
// /api/sessions/ID/fork), with guidance for its first step, the step's state
// to edit (prefilled from the record: GET /api/agent-steps for that step) and
// config changes.  State and config are checked as JSON objects here; what the
// API refuses is shown in the dialog, which stays open.  The original is never
// changed.  Once the fork is accepted the page opens it; it shows "pending"
// until a worker applies the create, then runs live like any session.  One
// <dialog> serves every step (built on first use).
import { get, post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { short, stepNumber } from "../core/format.js";
import { registerStepPart } from "../core/registry.js";
import { toast } from "../core/toast.js";

let ui = null;
let opened = 0;  // a state read answered after the dialog moved on is dropped

function build() {
  const field = (label, input, help) => h("label", label, help ? h("small", help) : null, input);
  ui = {
    title: h("h2", { id: "fork-title" }, "Fork"),
    guidance: h("textarea", { name: "guidance", rows: "2", maxlength: "20000",
      placeholder: "e.g. take the left road", dataset: { testid: "fork-guidance" } }),
    state: h("textarea", { name: "state", rows: "6", spellcheck: "false", dataset: { testid: "fork-state" } }),
    config: h("textarea", { name: "config", rows: "3", spellcheck: "false", placeholder: '{"max_steps": 10}',
      dataset: { testid: "fork-config" } }),
    error: h("p.form-error", { role: "alert", dataset: { testid: "fork-error" } }),
    submit: h("button.primary", { type: "submit", dataset: { testid: "fork-submit" } }, "Fork"),
    step: null,
    original: "",  // the state as read, to send state only when it was edited
  };
  const form = h("form", { method: "dialog", onsubmit: submit },
    ui.title,
    h("p.hint", "A new session of the same agent continues from this step's state; the original is not changed."),
    field("Guidance", ui.guidance, "optional: for the fork's first step"),
    field("State", ui.state, "a JSON object: the state the fork starts from (edit it to change it)"),
    field("Config changes", ui.config, "optional JSON object: keys that change the original's config"),
    ui.error,
    h("div.inline", ui.submit,
      h("button", { type: "button", onclick: () => ui.dialog.close(), dataset: { testid: "fork-cancel" } },
        "Cancel")));
  ui.dialog = h("dialog.replay-dialog.fork-dialog", { "aria-labelledby": "fork-title",
    dataset: { testid: "fork-dialog" } }, form);
  document.body.appendChild(ui.dialog);
}

async function open(step) {
  if (!ui) build();
  const mine = ++opened;
  ui.step = step;
  replace(ui.title, `Fork session ${short(step.session_id)} from step ${stepNumber(step.iteration)}`);
  ui.guidance.value = ui.config.value = "";
  replace(ui.error);
  ui.state.value = ui.original = "";
  ui.state.disabled = ui.submit.disabled = true;  // until the step's state is read
  ui.state.placeholder = "reading the step's state…";
  ui.dialog.showModal();
  ui.guidance.focus();
  try {
    const found = await get("/api/agent-steps", { session_id: step.session_id, min_iteration: step.iteration,
      max_iteration: step.iteration, limit: 1 });
    if (mine !== opened) return;
    const state = found.steps.length ? found.steps[0].state : step.state;
    ui.state.value = ui.original = JSON.stringify(state ?? {}, null, 2);
  } catch (err) {
    if (mine !== opened) return;
    replace(ui.error, "Could not read the step's state: " + err.message + ". The fork keeps it unless you type one.");
  } finally {
    if (mine === opened) {
      ui.state.disabled = ui.submit.disabled = false;
      ui.state.placeholder = "";
    }
  }
}

// A JSON object from a box, or a message saying what is wrong with it.
function objectOf(text, what) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { problem: `${what} is not valid JSON: ${err.message}` };
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) return { problem: `${what} must be a JSON object.` };
  return { value };
}

// The form as the API's body; a message when a box does not fit.
function body() {
  const out = { from_iteration: ui.step.iteration };
  if (ui.guidance.value.trim()) out.guidance = ui.guidance.value.trim();
  if (ui.state.value.trim() && ui.state.value !== ui.original) {
    const { value, problem } = objectOf(ui.state.value, "State");
    if (problem) return problem;
    out.state = value;
  }
  if (ui.config.value.trim()) {
    const { value, problem } = objectOf(ui.config.value, "Config changes");
    if (problem) return problem;
    out.config = value;
  }
  return out;
}

async function submit(event) {
  event.preventDefault();
  const made = body();
  if (typeof made === "string") return replace(ui.error, made);
  replace(ui.error);
  ui.submit.disabled = true;
  try {
    const fork = await post(`/api/sessions/${encodeURIComponent(ui.step.session_id)}/fork`, made);
    ui.dialog.close();
    toast("Fork accepted: session " + short(fork.session_id));
    location.hash = "#/session/" + fork.session_id;
  } catch (err) {
    replace(ui.error, "Could not fork: " + err.message);
  } finally {
    ui.submit.disabled = false;
  }
}

registerStepPart((step) => h("div.step-actions",
  h("button.fork-here", { type: "button", dataset: { testid: "fork-here" },
    "aria-label": `Fork from here (step ${stepNumber(step.iteration)})`,
    title: "Start a new session of this agent that continues from this step",
    onclick: () => open(step) }, "Fork from here")));
