// "Replay…" beside "Fork from here" on every step of a session's timeline: a
// dialog that re-runs the session from this step (POST /api/sessions/ID/replay)
// with another moniker, profile or config, serving the recorded tool results
// (tools "recorded"), or running the tools again ("live"), or serving them until
// the first divergence and then running them ("recorded_then_live").  Once the
// replay is accepted the page opens it; its record links to the diff against
// its source.  One <dialog> serves every step (built on first use).
import { post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { short, stepNumber } from "../core/format.js";
import { registerStepPart } from "../core/registry.js";
import { toast } from "../core/toast.js";

const TOOLS = [
  ["recorded", "recorded: serve the recorded results, stop at the first divergence"],
  ["recorded_then_live", "recorded, then live: serve them, run the tools after a divergence"],
  ["live", "live: run every tool again"],
];

let ui = null;

function build() {
  const field = (label, input, help) => h("label", label, help ? h("small", help) : null, input);
  ui = {
    title: h("h2", { id: "replay-title" }, "Replay"),
    from: h("input", { type: "number", name: "from_step", min: "1", required: true, dataset: { testid: "replay-from" } }),
    to: h("input", { type: "number", name: "to_step", min: "1", dataset: { testid: "replay-to" } }),
    tools: h("select", { name: "tools", dataset: { testid: "replay-tools" } },
      TOOLS.map(([value, label]) => h("option", { value }, label))),
    moniker: h("input", { type: "text", name: "moniker", maxlength: "200", autocomplete: "off",
      dataset: { testid: "replay-moniker" } }),
    profile: h("input", { type: "text", name: "profile", maxlength: "200", autocomplete: "off",
      dataset: { testid: "replay-profile" } }),
    config: h("textarea", { name: "config", rows: "4", spellcheck: "false", placeholder: '{"llm": {"model": "…"}}',
      dataset: { testid: "replay-config" } }),
    error: h("p.form-error", { role: "alert" }),
    submit: h("button.primary", { type: "submit", dataset: { testid: "replay-submit" } }, "Replay"),
    sessionId: null,
  };
  const form = h("form", { method: "dialog", onsubmit: submit },
    ui.title,
    h("p.hint", "A new session of the same agent re-runs this one from a step, with the changes below; "
      + "the original is not changed."),
    h("div.row", field("From step", ui.from), field("To step", ui.to, "optional: stop after it")),
    field("Tools", ui.tools),
    h("div.row", field("Moniker", ui.moniker, "optional"), field("Profile", ui.profile, "optional")),
    field("Config changes", ui.config, "optional JSON object, e.g. another model"),
    ui.error,
    h("div.inline", ui.submit,
      h("button", { type: "button", onclick: () => ui.dialog.close(), dataset: { testid: "replay-cancel" } },
        "Cancel")));
  ui.dialog = h("dialog.replay-dialog", { "aria-labelledby": "replay-title", dataset: { testid: "replay-dialog" } },
    form);
  document.body.appendChild(ui.dialog);
}

function open(step) {
  if (!ui) build();
  ui.sessionId = step.session_id;
  replace(ui.title, `Replay session ${short(step.session_id)}`);
  ui.from.value = String(stepNumber(step.iteration));
  ui.to.value = "";
  replace(ui.error);
  ui.dialog.showModal();
  ui.from.focus();
}

// The form as the API's body; a message when a field does not fit.
function body() {
  const from = Number(ui.from.value);
  if (!Number.isInteger(from) || from < 1) return "From step must be a whole number from 1.";
  const out = { from_iteration: from - 1, tools: ui.tools.value };
  if (ui.to.value !== "") {
    const to = Number(ui.to.value);
    if (!Number.isInteger(to) || to < from) return "To step must be a whole number, not before From step.";
    out.to_iteration = to - 1;
  }
  if (ui.moniker.value.trim() && ui.profile.value.trim()) return "Give a moniker or a profile, not both.";
  if (ui.moniker.value.trim()) out.moniker = ui.moniker.value.trim();
  if (ui.profile.value.trim()) out.profile = ui.profile.value.trim();
  if (ui.config.value.trim()) {
    try {
      out.config = JSON.parse(ui.config.value);
    } catch (err) {
      return "Config changes are not valid JSON: " + err.message;
    }
    if (!out.config || typeof out.config !== "object" || Array.isArray(out.config)) {
      return "Config changes must be a JSON object.";
    }
  }
  return out;
}

async function submit(event) {
  event.preventDefault();
  const made = body();
  if (typeof made === "string") return replace(ui.error, made);
  ui.submit.disabled = true;
  try {
    const replay = await post(`/api/sessions/${encodeURIComponent(ui.sessionId)}/replay`, made);
    ui.dialog.close();
    toast("Replay accepted: session " + short(replay.session_id));
    location.hash = "#/session/" + replay.session_id;
  } catch (err) {
    replace(ui.error, "Could not replay: " + err.message);
  } finally {
    ui.submit.disabled = false;
  }
}

registerStepPart((step) => h("div.step-actions",
  h("button.fork-here", { type: "button", dataset: { testid: "replay-here" },
    "aria-label": `Replay… from here (step ${stepNumber(step.iteration)})`,
    title: "Re-run this session from this step with another model, prompt or profile",
    onclick: () => open(step) }, "Replay…")));
