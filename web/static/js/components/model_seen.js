// "What the model saw" on a step that called a model: the request as it was
// sent (the messages, the output schema, the options), the reply as received,
// and how the prompt's tokens split between its parts, read from
// GET /api/sessions/<id>/steps/<n>/model-io when first opened (a timeline of
// thousands of steps reads nothing it never shows).  The service keeps them
// for each session's last steps only, never for a private session; an older
// step says so.
import { get } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { tokens } from "../core/format.js";
import { registerStepPart } from "../core/registry.js";
import { jsonView } from "./json_view.js";

const PARTS = { system: "system prompt", task: "task", history: "history", tools: "tools", state: "state",
  inputs: "inputs (guidance, tool results, messages)" };

registerStepPart((step) => {
  const calls = step.usage && step.usage.calls;
  if (!calls || !calls.length) return null;
  const body = h("div.model-seen-body");
  const details = h("details.model-seen", { dataset: { testid: "model-seen" } },
    h("summary", "What the model saw"), body);
  details.addEventListener("toggle", () => {
    if (!details.open || body.childElementCount) return;
    replace(body, h("p.hint", "Loading…"));
    get(`/api/sessions/${step.session_id}/steps/${step.iteration}/model-io`)
      .then((seen) => replace(body, seen.calls.length ? seen.calls.map(call) : h("p.hint", seen.why)))
      .catch((err) => replace(body, h("p.hint", "Could not load: " + err.message)));
  });
  return details;
});

function call(c) {
  const request = c.request || {};
  const { messages, response_format: format, grammar, ...options } = request;
  return h("section.model-call", { dataset: { testid: "model-call" } },
    h("p.model-heading", c.ask ? `Asked again (${c.ask + 1})` : "Request",
      c.mode ? h("span.hint", ` · structured output: ${c.mode}`) : null),
    split(c.tokens),
    h("ol.model-messages", (messages || []).map((m) => h("li", { dataset: { testid: "model-message" } },
      h("div.model-role", m.role), h("pre.model-content", { tabIndex: 0 }, text(m.content))))),
    format ? jsonView("output schema (response_format)", format) : null,
    grammar ? jsonView("output grammar", grammar) : null,
    jsonView("options", options),
    h("p.model-heading", "Reply"),
    h("pre.model-content", { tabIndex: 0, dataset: { testid: "model-reply" } }, c.reply ?? "(none)"));
}

const text = (content) => (typeof content === "string" ? content
  : Array.isArray(content) ? content.map((p) => (p && p.text) || "").join("\n") : JSON.stringify(content));

// The prompt's parts as bars of one scale: each part's estimated tokens, and
// what they leave of the server's count (the template and the output schema).
function split(t) {
  if (!t || !t.parts) return null;
  const parts = Object.entries(PARTS).map(([key, label]) => [label, t.parts[key] || 0]);
  const counted = parts.reduce((sum, [, n]) => sum + n, 0);
  if (t.input_tokens != null && t.input_tokens > counted) {
    parts.push(["template and output schema", t.input_tokens - counted]);
  }
  const whole = Math.max(1, ...[counted, t.input_tokens || 0]);
  return h("div.token-split", { dataset: { testid: "token-split" } },
    h("p.hint", t.input_tokens != null
      ? `${tokens(t.input_tokens)} tokens in${t.estimated ? " (estimated)" : ""}, ${tokens(t.output_tokens || 0)} out; `
        + "the parts are estimated (~4 characters a token)" : "the parts' tokens, estimated"),
    h("table.token-parts", h("tbody", parts.map(([label, n]) => h("tr",
      h("th", { scope: "row" }, label), h("td", tokens(n)),
      h("td.bar-cell", h("span.token-bar", { style: { width: `${Math.round((n / whole) * 100)}%` } })))))));
}
