// Tool calls in the session timeline (StepFrame-v1), live.
//
// Each call is shown inside the step that made it: name, status, duration, and
// its args and result in an expandable box; its status in words (TOOL_WORDS).
// A call waiting for approval shows its args unfolded (what you approve) and
// Approve / Deny buttons; a call waiting for an external result has a box to
// post it.  Rows come over HTTP on every catch-up of the session
// (GET /api/tool-calls?session_id=…) and live as `tool_call` events, one per
// change of a row; the newest row per id wins (by updated_at), so an event seen
// both ways is shown once.
//
// Plugged in with one import in main.js; it uses three hooks of core/registry.js:
// a step part (the box inside each step), a live event, and a session catch-up.
import { get, post } from "../core/api.js";
import { $, h } from "../core/dom.js";
import { registerLiveEvent, registerSessionHook, registerStepPart } from "../core/registry.js";
import { toast } from "../core/toast.js";
import { argsEditor } from "./args_editor.js";
import { refusedWords } from "./settled.js";

const rows = new Map();  // tool call id -> newest row (open session)
let sessionId = null;

function reset(id) {
  if (id === sessionId) return;
  sessionId = id;
  rows.clear();
}

function merge(row) {
  if (row.session_id !== sessionId) return;
  const known = rows.get(row.id);
  if (known && (row.updated_at || "") < (known.updated_at || "")) return;
  rows.set(row.id, row);
  render(row);
}

function boxOf(iteration) {
  return $(`[data-testid=steps] li.step[data-iteration="${iteration}"] .tool-calls`);
}

function render(row) {
  const list = boxOf(row.iteration);
  if (!list) return;  // its step is not shown yet: the step part draws it
  const node = list.querySelector(`[data-call="${row.id}"]`);
  const open = node ? Boolean(node.querySelector("details")?.open) : false;
  const fresh = callNode(row, open);
  if (node) node.replaceWith(fresh);
  else {
    const later = [...list.children].find((n) => Number(n.dataset.seq) > row.seq);
    list.insertBefore(fresh, later || null);
  }
}

// A tool call's status in words (the raw one on hover, and as the badge's class).
const TOOL_WORDS = { pending: "queued", waiting_approval: "waits for your approval", waiting_result:
  "waits for a result", running: "running", success: "succeeded", failed: "failed", denied: "denied",
unknown: "outcome unknown", replayed: "replayed from the record" };

const toolBadge = (status) => h("span.badge." + (status || "unknown"), { title: status },
  TOOL_WORDS[status] || status || "unknown");

function callNode(row, open) {
  return h("div.tool-call." + row.status, { dataset: { call: row.id, seq: String(row.seq), testid: "tool-call" } },
    h("div.tool-head", h("span.tool-name", "🔧 " + row.name), toolBadge(row.status),
      row.duration_ms != null ? h("span.hint", ` ${Math.round(row.duration_ms)} ms`) : null,
      row.attempts > 1 ? h("span.hint", ` · attempt ${row.attempts}`) : null,
      row.error ? h("div.step-error", row.error) : null),
    h("details", { open }, h("summary", "args and result"),
      h("div.hint", "args"), h("pre.tool-json", JSON.stringify(row.args, null, 2)),
      row.original_args != null ? [h("div.hint", { dataset: { testid: "tool-original-args" } },
        "edited before approval; the model asked"), h("pre.tool-json", JSON.stringify(row.original_args, null, 2))]
        : null,
      row.status === "success" ? [h("div.hint", "result"), h("pre.tool-json", JSON.stringify(row.result, null, 2))]
        : null),
    controls(row));
}

function controls(row) {
  if (row.status === "waiting_approval") {
    const reason = h("input", { placeholder: "reason (told to the model)", name: "reason",
      "aria-label": "Reason for denying " + row.name });
    // What is to be approved is shown, not folded away in "args and result", and can be edited first.
    const args = argsEditor(row.args, { tool: row.name, testid: "tool-approval-args" });
    const approve = () => {
      const body = args.approval();
      if (body) decide(row, "approve", body);
    };
    return h("div.tool-actions", h("span", "Run ", h("strong", row.name), " with"), args.root,
      h("button", { type: "button", dataset: { testid: "tool-approve" }, onclick: approve }, "Approve"),
      h("button.danger", { type: "button", dataset: { testid: "tool-deny" },
        onclick: () => decide(row, "deny", reason.value ? { reason: reason.value } : {}) }, "Deny"),
      reason);
  }
  if (row.status === "waiting_result" && row.name === "ask_user") return answerForm(row);
  if (row.status === "waiting_result") {
    const text = h("textarea", { placeholder: "result: JSON or plain text", name: "result", rows: 2,
      "aria-label": "Result of " + row.name });
    return h("form.tool-actions", { onsubmit: (e) => {
      e.preventDefault();
      let result = text.value;
      try { result = JSON.parse(text.value); } catch (err) { /* plain text is a fine result */ }
      decide(row, "result", { result });
    } }, text, h("button", { type: "submit", dataset: { testid: "tool-post-result" } }, "Post result"));
  }
  return null;
}

// A question (ask_user): answered like on the "Needs you" page (POST /api/sessions/<id>/answer).
function answerForm(row) {
  const args = row.args || {};
  const text = h("input", { name: "answer", placeholder: "your answer", "aria-label": "Answer to: " + args.question });
  const send = async (answer) => {
    try {
      await post(`/api/sessions/${row.session_id}/answer`, { text: answer, tool_call_id: row.id });
      toast("answer sent");
    } catch (err) {
      toast(await refusedWords(err, row.id), true);
    }
  };
  return h("form.tool-actions", { onsubmit: (e) => {
    e.preventDefault();
    if (text.value.trim()) send(text.value);
  } }, h("strong", args.question || ""), (args.choices || []).map((choice) => h("button", { type: "button",
    onclick: () => send(choice) }, choice)), text, h("button", { type: "submit" }, "Answer"));
}

async function decide(row, verb, body) {
  try {
    await post(`/api/tool-calls/${row.id}/${verb}`, body);
    toast(`${verb} of ${row.name} requested`);
  } catch (err) {
    toast(err.status === 409 ? await refusedWords(err, row.id) : `${verb} of ${row.name} failed: ${err.message}`,
      true);
  }
}

async function catchUp(id) {
  reset(id);
  for (let offset = 0; ; offset += 1000) {
    const data = await get("/api/tool-calls", { session_id: id, limit: 1000, offset });
    if (id !== sessionId) return;
    data.tool_calls.forEach(merge);
    if (data.tool_calls.length < 1000) break;
  }
}

// The box inside every step; the calls already known for it are drawn at once.
registerStepPart((step) => {
  reset(step.session_id);
  const known = [...rows.values()].filter((r) => r.iteration === step.iteration).sort((a, b) => a.seq - b.seq);
  return h("div.tool-calls", known.map((row) => callNode(row, false)));
});
// A row whose args or result were too big for the event (domain/events.py) is read over HTTP.
registerLiveEvent("tool_call", (row) => {
  if (row.session_id !== sessionId) return;
  if (!row.omitted) return merge(row);
  get(`/api/tool-calls/${encodeURIComponent(row.id)}`).then(merge, () => {});  // the next catch-up reads it
});
registerSessionHook(catchUp);
