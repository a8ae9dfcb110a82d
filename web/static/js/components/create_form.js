// The form that starts an agent, from a moniker or from a profile.  Its config
// fields come from the schemas of GET /api/monikers: the chosen moniker's own
// keys, a few of the keys every session accepts, and a JSON box for the rest.
// A profile (GET /api/profiles) brings its own moniker and config: then only
// the JSON box is sent, as the overrides the profile allows.  The API checks
// the whole config and names a bad key; that message is shown here.  After a
// create the fields are drawn again from the schemas, so they show the real
// defaults (form.reset() would put back the HTML defaults: the first moniker,
// unchecked boxes), and the moniker or profile chosen stays chosen.  A moniker
// that takes `llm` gets a choice of the operator's model endpoints (GET
// /api/endpoints) and a model among those the chosen one serves: a config names
// an endpoint, never a URL or a key.
import { get, post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { fieldsFor, read } from "./schema_fields.js";

const COMMON_KEYS = ["interval_s", "max_steps", "stop_on_done", "budget_tokens", "budget_cost"];

export function createForm() {
  let monikers = [];
  let sessionSchema = null;
  let profiles = [];
  let endpoints = [];
  const error = h("p.form-error", { role: "alert", dataset: { testid: "create-error" } });
  const monikerSelect = h("select", { id: "create-moniker", name: "moniker", required: true,
    dataset: { testid: "create-moniker" }, onchange: () => drawMonikerFields() });
  const monikerHelp = h("p.hint", { id: "moniker-help" });
  const profileSelect = h("select", { id: "create-profile", name: "profile", dataset: { testid: "create-profile" },
    onchange: () => drawProfile() });
  const profileHelp = h("p.hint", { dataset: { testid: "create-profile-help" } });
  const monikerPart = h("div.moniker-part");
  const monikerFields = h("div.moniker-fields", { dataset: { testid: "moniker-fields" } });
  const endpointSelect = h("select", { id: "create-llm-endpoint", dataset: { testid: "create-llm-endpoint" },
    onchange: () => drawModels() });
  const modelChoices = h("datalist", { id: "create-llm-models" });
  const endpointWarning = h("p.hint.warning", { role: "status", dataset: { testid: "create-llm-warning" } });
  const modelInput = h("input", { id: "create-llm-model", list: "create-llm-models", maxlength: "200",
    dataset: { testid: "create-llm-model" } });
  const llmFields = h("div.llm-fields", { dataset: { testid: "create-llm" } },
    h("label", { for: "create-llm-endpoint" }, "Model endpoint ", h("small", "one of the operator's"),
      endpointSelect),
    endpointWarning,
    h("label", { for: "create-llm-model" }, "Model ", h("small", "one the endpoint serves; empty: its default"),
      modelInput, modelChoices));
  const commonFields = h("div.common-fields");
  const conversation = h("select", { id: "create-conversation", name: "conversation_id",
    dataset: { testid: "create-conversation" } });
  const json = h("textarea", { id: "create-json", name: "config_json", rows: 3, spellcheck: false,
    placeholder: '{"retries": {"transient": 5}}', dataset: { testid: "create-json" } });

  const nameInput = h("input", { id: "create-name", name: "agent_name", maxlength: "200",
    dataset: { testid: "create-name" } });
  const taskInput = h("textarea", { id: "create-task", name: "task", rows: 2, placeholder: "tell jokes about cats",
    dataset: { testid: "create-task" } });
  const form = h("form.panel.side", { id: "create-form", autocomplete: "off", dataset: { testid: "create-form" },
    "aria-labelledby": "create-title", onsubmit: submit, oninput: () => (error.textContent = "") },
  h("h2", { id: "create-title" }, "Start an agent"),
  h("label", { for: "create-name" }, "Name ", h("small", "optional; shown instead of the id"),
    nameInput),
  h("label", { for: "create-profile" }, "Profile ", h("small", "optional; a profile brings its moniker, prompt, "
    + "tools and limits"), profileSelect),
  profileHelp,
  monikerPart,
  h("label", { for: "create-task" }, "Task ", h("small", "what it should do"),
    taskInput),
  h("label", { for: "create-conversation" }, "Conversation ",
    h("small", "optional; it posts its steps there and hears messages"), conversation),
  h("label", { for: "create-json" }, "More settings (JSON) ",
    h("small", "any other config keys; merged over the fields above"), json),
  h("button.primary", { type: "submit", dataset: { testid: "create-submit" } }, "Start agent"),
  error);
  replace(monikerPart,
    h("label", { for: "create-moniker" }, "Moniker ", h("small", "what it does at each step"), monikerSelect),
    monikerHelp,
    h("fieldset", h("legend", "Settings of this moniker"), monikerFields),
    h("fieldset", h("legend", "Every session"), commonFields));

  // A profile chosen: the moniker and its fields give way to the profile's own.
  function drawProfile() {
    const profile = profiles.find((p) => p.name === profileSelect.value);
    monikerPart.hidden = Boolean(profile);
    monikerSelect.disabled = Boolean(profile);
    profileHelp.textContent = profile ? `${profile.description || ""} Moniker ${profile.moniker}; the JSON box `
      + "below overrides what the profile allows." : "";
  }

  // The fields as the schemas say, empty or at their defaults.
  function drawDefaults() {
    replace(commonFields, fieldsFor(sessionSchema, COMMON_KEYS, "run"));
    drawMonikerFields();
  }

  function drawMonikerFields() {
    const moniker = monikers.find((m) => m.name === monikerSelect.value);
    monikerHelp.textContent = moniker ? moniker.description : "";
    if (!moniker) return replace(monikerFields);
    if (moniker.config_schema === null) {
      return replace(monikerFields, h("p.hint", "This moniker declares no settings; put its keys in the JSON box "
        + "(they are passed through unchecked)."));
    }
    const fields = fieldsFor(moniker.config_schema, null, "cfg");
    const takesLlm = Boolean(moniker.config_schema.properties && moniker.config_schema.properties.llm);
    if (takesLlm) fields.push(llmFields);
    replace(monikerFields, fields.length ? fields : h("p.hint", "No settings of its own."));
  }

  // The endpoints to choose from, and the models of the chosen one.
  function drawEndpoints() {
    const keep = endpointSelect.value;
    replace(endpointSelect, endpoints.map((e) => h("option", { value: e.name }, e.name)));
    endpointSelect.value = endpoints.some((e) => e.name === keep) ? keep : "default";
    drawModels();
  }

  function drawModels() {
    const endpoint = endpoints.find((e) => e.name === endpointSelect.value);
    const models = endpoint && Array.isArray(endpoint.models) ? endpoint.models : [];
    replace(modelChoices, models.map((m) => h("option", { value: m })));
    modelInput.placeholder = endpoint ? endpoint.default_model : "";
    // A llama.cpp model with no chat template of its own answers, but poorly (monikers/chat_template.py).
    endpointWarning.textContent = endpoint && endpoint.chat_template_warning
      ? `This endpoint: ${endpoint.chat_template_warning}.` : "";
  }

  // {endpoint?, model?} as chosen: nothing when the defaults stand.
  function llmChoice() {
    if (!llmFields.isConnected) return null;
    const llm = {};
    if (endpointSelect.value && endpointSelect.value !== "default") llm.endpoint = endpointSelect.value;
    if (modelInput.value.trim()) llm.model = modelInput.value.trim();
    return Object.keys(llm).length ? llm : null;
  }

  async function load() {
    const [m, c, p, e] = await Promise.all([get("/api/monikers"), get("/api/conversations", { limit: 200 }),
      get("/api/profiles").catch(() => ({ profiles: [] })), get("/api/endpoints").catch(() => ({ endpoints: [] }))]);
    monikers = m.monikers;
    endpoints = e.endpoints;
    drawEndpoints();
    profiles = p.profiles.filter((x) => x.ok);
    const keepProfile = profileSelect.value;
    replace(profileSelect, h("option", { value: "" }, "— none: choose a moniker —"),
      profiles.map((x) => h("option", { value: x.name }, x.name)));
    profileSelect.value = profiles.some((x) => x.name === keepProfile) ? keepProfile : "";
    sessionSchema = m.session_config_schema;
    const keep = monikerSelect.value || "joke";
    replace(monikerSelect, monikers.map((x) => h("option", { value: x.name, selected: x.name === keep }, x.name)));
    const keepConversation = conversation.value;
    replace(conversation, h("option", { value: "" }, "— none —"),
      c.conversations.map((x) => h("option", { value: x.conversation_id }, x.title || x.conversation_id)));
    conversation.value = keepConversation;
    if (!conversation.value) conversation.value = "";
    if (!commonFields.childElementCount) replace(commonFields, fieldsFor(sessionSchema, COMMON_KEYS, "run"));
    drawMonikerFields();
    drawProfile();
    clearUnreachable();
    return monikers;  // the agents page's moniker filter lists them too (one read for both)
  }

  function config(fromProfile) {
    const values = fromProfile ? {} : { ...read(commonFields), ...read(monikerFields) };
    const llm = fromProfile ? null : llmChoice();
    if (llm) values.llm = llm;
    const text = json.value.trim();
    if (!text) return values;
    let extra;
    try {
      extra = JSON.parse(text);
    } catch (err) {
      throw new Error("More settings: not valid JSON (" + err.message + ")");
    }
    if (typeof extra !== "object" || Array.isArray(extra) || extra === null) {
      throw new Error("More settings: must be a JSON object, e.g. {\"max_runtime_s\": 60}");
    }
    return { ...values, ...extra };
  }

  async function submit(event) {
    event.preventDefault();
    error.textContent = "";
    delete error.dataset.unreachable;
    try {
      const profile = profileSelect.value;
      const body = { task: taskInput.value, config: config(Boolean(profile)) };
      if (profile) body.profile = profile;
      else body.moniker = monikerSelect.value;
      if (nameInput.value.trim()) body.name = nameInput.value.trim();
      if (conversation.value) body.conversation_id = conversation.value;
      const made = await post("/api/agents", body);
      nameInput.value = taskInput.value = json.value = modelInput.value = "";
      conversation.value = "";
      drawDefaults();  // the moniker or profile chosen stays
      location.hash = "#/session/" + made.session_id;
    } catch (err) {
      error.textContent = err.message;
      if (err.code === "unreachable") error.dataset.unreachable = "1";
    }
  }

  // The service is back (the page caught up): a "cannot be reached" message is over.
  function clearUnreachable() {
    if (error.dataset.unreachable) {
      error.textContent = "";
      delete error.dataset.unreachable;
    }
  }

  return { form, load, clearUnreachable };
}
