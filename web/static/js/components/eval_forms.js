// The Evals page's two forms: a new eval set (from session ids, e.g. the ones
// selected elsewhere and passed as "#/evals?session_ids=a,b", or from a search,
// "#/evals?q=words"), and a new run of a set (overrides, tools mode, scorers).
// Each returns {root, fill?} and calls onDone(answer) once the API accepted it.
import { get, post } from "../core/api.js";
import { h, replace } from "../core/dom.js";

// recorded: serve the recorded results, stop at a divergence; then live: run the tools after one; live: run them all
const TOOLS = [["recorded", "recorded"], ["recorded_then_live", "recorded, then live"], ["live", "live"]];
const DEFAULT_SCORERS = ["final_equal", "tool_sequence_equal", "divergence_step", "steps", "tokens", "errors"];
const field = (label, input, help) => h("label", label, help ? h("small", help) : null, input);

// An object from a textarea of JSON (blank: null); a string says what is wrong.
function jsonObject(text, what) {
  if (!text.trim()) return null;
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return `${what} is not valid JSON: ${err.message}`;
  }
  return value && typeof value === "object" && !Array.isArray(value) ? value : `${what} must be a JSON object.`;
}

export function evalSetForm(onDone) {
  const name = h("input", { name: "name", required: true, maxlength: "200", dataset: { testid: "evalset-name" } });
  const ids = h("textarea", { name: "session_ids", rows: "3", spellcheck: "false",
    dataset: { testid: "evalset-ids" } });
  const q = h("input", { name: "q", maxlength: "500", dataset: { testid: "evalset-q" } });
  const status = h("select", { name: "status" }, ["", "done", "error", "stopped"].map((s) =>
    h("option", { value: s }, s || "any")));
  const from = h("input", { type: "number", name: "from_step", min: "1", value: "1" });
  const error = h("p.form-error", { role: "alert" });
  const submit = h("button.primary", { type: "submit", dataset: { testid: "evalset-submit" } }, "Create the set");
  const root = h("form", { dataset: { testid: "evalset-form" }, onsubmit: async (event) => {
    event.preventDefault();
    const body = { name: name.value.trim(), from_iteration: Math.max(0, Number(from.value || 1) - 1) };
    const list = ids.value.split(/[\s,]+/).filter(Boolean);
    if (list.length && q.value.trim()) return replace(error, "Give session ids or search words, not both.");
    if (list.length) body.session_ids = list;
    else if (q.value.trim()) body.search = { q: q.value.trim(), ...(status.value ? { status: status.value } : {}),
      limit: 200 };
    else return replace(error, "Give session ids or search words.");
    submit.disabled = true;
    try {
      onDone(await post("/api/evalsets", body));
      replace(error);
    } catch (err) {
      replace(error, "Could not create the set: " + err.message);
    } finally {
      submit.disabled = false;
    }
  } },
  h("h2", { id: "evalset-form-title" }, "New eval set"),
  field("Name", name),
  field("Session ids", ids, "one per line or comma-separated (or search below)"),
  h("div.row", field("Search words", q, "the sessions whose steps, messages or tool calls match"),
    field("Status of the hits", status)),
  field("Replay from step", from),
  error, submit);
  return { root, fill(query) {
    if (query.get("session_ids")) ids.value = query.get("session_ids").split(",").join("\n");
    if (query.get("q")) q.value = query.get("q");
  } };
}

export function evalRunForm(evalsetId, onDone) {
  const tools = h("select", { name: "tools", dataset: { testid: "run-tools" } },
    TOOLS.map(([value, label]) => h("option", { value }, label)));
  const moniker = h("input", { name: "moniker", maxlength: "128", autocomplete: "off" });
  const profile = h("input", { name: "profile", maxlength: "64", autocomplete: "off" });
  const config = h("textarea", { name: "config", rows: "3", spellcheck: "false", placeholder: '{"llm": {"model": "…"}}',
    dataset: { testid: "run-config" } });
  const concurrency = h("input", { type: "number", name: "concurrency", min: "1", max: "64", value: "4" });
  const scorers = h("fieldset", { dataset: { testid: "run-scorers" } }, h("legend", "Scorers"));
  const error = h("p.form-error", { role: "alert" });
  const submit = h("button.primary", { type: "submit", dataset: { testid: "run-submit" } }, "Start the run");
  get("/api/scorers").then(({ scorers: list }) => list.forEach((s) => scorers.appendChild(
    h("label.check", h("input", { type: "checkbox", name: "scorer", value: s.name,
      checked: DEFAULT_SCORERS.includes(s.name) }), s.name, h("small", s.description))))).catch((err) =>
    replace(error, "Could not read the scorers: " + err.message));
  const root = h("form", { dataset: { testid: "run-form" }, onsubmit: async (event) => {
    event.preventDefault();
    const body = { tools: tools.value, concurrency: Number(concurrency.value || 4),
      scorers: [...scorers.querySelectorAll("input:checked")].map((c) => c.value) };
    if (!body.scorers.length) return replace(error, "Pick at least one scorer.");
    if (moniker.value.trim() && profile.value.trim()) return replace(error, "Give a moniker or a profile, not both.");
    if (moniker.value.trim()) body.moniker = moniker.value.trim();
    if (profile.value.trim()) body.profile = profile.value.trim();
    const changes = jsonObject(config.value, "Config changes");
    if (typeof changes === "string") return replace(error, changes);
    if (changes) body.config = changes;
    submit.disabled = true;
    try {
      onDone(await post(`/api/evalsets/${encodeURIComponent(evalsetId)}/runs`, body));
      replace(error);
    } catch (err) {
      replace(error, "Could not start the run: " + err.message);
    } finally {
      submit.disabled = false;
    }
  } },
  h("h2", "Start a run"),
  h("p.hint", "Every session of the set is replayed under these changes and each replay is scored against its "
    + "recording."),
  h("div.row", field("Moniker", moniker, "optional"), field("Profile", profile, "optional")),
  field("Config changes", config, "optional JSON object, e.g. another model"),
  h("div.row", field("Tools", tools, "recorded results served; live: run again"),
    field("Replays at once", concurrency)),
  scorers, error, submit);
  return { root };
}
