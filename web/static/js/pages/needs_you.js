// The "Needs you" page: everything agents wait on a person for, oldest first
// (GET /api/waiting): questions (ask_user) answered in place (a choice button or
// free text), approvals approved or denied in place, other external tools'
// results posted in place.  It follows the "all" room: any tool_call event
// (a question asked, answered or timed out elsewhere) reloads the list shortly,
// updating it in place (update below) so that what you type survives.
// The nav count is components/needs_you_count.js.
import { get, post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { agentLabel, when } from "../core/format.js";
import { registerPage } from "../core/registry.js";
import { toast } from "../core/toast.js";
import { refreshCount } from "../components/needs_you_count.js";
import { argsEditor } from "../components/args_editor.js";
import { refusedWords } from "../components/settled.js";
import { decideAll } from "../components/decide_all.js";

const PAGE = 100;
const KIND_WORDS = { question: "question", approval: "approval", result: "external result" };
let ui = null;
let reloadTimer = null;
const shown = { kind: "", tool: "" };  // the filters ("" is any), kept while the page is left

function mount(section) {
  const kind = h("select", { id: "waiting-kind", dataset: { testid: "waiting-kind" },
    onchange: () => { shown.kind = kind.value; reload(); } });
  const tool = h("select", { id: "waiting-tool", dataset: { testid: "waiting-tool" },
    onchange: () => { shown.tool = tool.value; reload(); } });
  const decide = decideAll({ filter: () => (shown.tool ? { tool: shown.tool } : {}),
    done: () => scheduleReload(300) });
  ui = {
    kind, tool, decide,
    filters: h("div.filters.waiting-filters", { role: "group", "aria-label": "Filter what waits" },
      h("label", { for: "waiting-kind" }, "Show"), kind, h("label", { for: "waiting-tool" }, "Tool"), tool,
      decide.root),
    list: h("ul.waiting-list", { tabIndex: -1, "aria-label": "Waiting for you", dataset: { testid: "waiting" } }),
    empty: h("p.empty", { hidden: true }),
    more: h("p.hint", { hidden: true }),
    count: h("span.hint"),
  };
  replace(section, h("div.panel", h("h1", "Needs you ", ui.count), ui.filters, ui.list, ui.empty, ui.more));
}

const reload = () => load().catch((err) => toast("Could not load: " + err.message, true));

async function load() {
  const data = await get("/api/waiting", { limit: PAGE, ...(shown.kind ? { kind: shown.kind } : {}),
    ...(shown.tool ? { tool: shown.tool } : {}) });
  update(data.waiting);
  drawFilters(data);
  const filtered = shown.kind || shown.tool;
  ui.empty.hidden = data.waiting.length > 0;
  ui.empty.textContent = filtered ? "Nothing that matches these filters waits for you."
    : "Nothing waits for you. Questions agents ask (ask_user) and tool calls that need your approval show up here.";
  ui.count.textContent = data.total ? `(${data.total} open${filtered ? " that match" : ""}, oldest first)` : "";
  ui.more.hidden = data.total <= data.waiting.length;
  ui.more.textContent = `${data.total - data.waiting.length} more wait behind these; they show as these are settled.`;
  if (!filtered) refreshCount(data.total);
}

// The filters' options say how many each would show (the answer's kinds and
// tools); a chosen tool no longer waiting stays listed, at 0, until changed.
// Approve all / Deny all reach the approvals the filters show.
function drawFilters(data) {
  const option = (value, label, n) => h("option", { value }, n == null ? label : `${label} (${n})`);
  const kinds = Object.entries(KIND_WORDS).map(([k, word]) => option(k, word + "s", data.kinds[k]));
  replace(ui.kind, option("", "everything"), kinds);
  const tools = { ...data.tools };
  if (shown.tool && !(shown.tool in tools)) tools[shown.tool] = 0;
  replace(ui.tool, option("", "any"), Object.entries(tools).map(([t, n]) => option(t, t, n)));
  ui.kind.value = shown.kind;
  ui.tool.value = shown.tool;
  const approvals = shown.kind && shown.kind !== "approval" ? 0 : data.kinds.approval;
  ui.decide.refresh(approvals);
}

// Keyed in place, by tool call id: a settled item's card goes, a new one is
// inserted where it belongs, and every other card (the one being typed in,
// with its focus and selection) stays the very same node, untouched.  The
// list is oldest first and items keep their order, so no card ever moves.
function update(waiting) {
  const wanted = new Set(waiting.map((w) => w.tool_call_id));
  const cards = new Map([...ui.list.children].map((li) => [li.dataset.call, li]));
  for (const [call, li] of cards) {
    if (wanted.has(call)) continue;
    if (li.contains(document.activeElement)) ui.list.focus({ preventScroll: true });
    li.remove();
  }
  waiting.forEach((w, at) => {
    const here = ui.list.children[at] || null;
    if (here && here.dataset.call === w.tool_call_id) return;
    ui.list.insertBefore(cards.get(w.tool_call_id) || item(w), here);
  });
}

function item(w) {
  const session = w.session || {};
  const who = agentLabel({ name: session.name, agent_id: w.agent_id });
  const parent = session.parent_session_id
    ? h("a.hint", { href: "#/session/" + session.parent_session_id }, " · child of another agent") : null;
  return h("li.waiting-item", { dataset: { testid: "waiting-item", call: w.tool_call_id, kind: w.kind } },
    h("div.waiting-head",
      h("span.badge.kind", KIND_WORDS[w.kind] || w.kind), " ",
      h("a.waiting-who", { href: `#/session/${w.session_id}?iteration=${w.iteration}&tool_call=${w.tool_call_id}` },
        who),
      parent, " ", h("span.hint", "asked ", when(w.created_at)),
      w.deadline ? h("span.hint", " · answers itself ", when(w.deadline),
        w.default != null ? ` with “${w.default}”` : " as unanswered") : null),
    context(w),
    w.kind === "question" ? question(w) : w.kind === "approval" ? approval(w) : result(w));
}

// Why it is asked: the session's task and what the step that made the call said.
function context(w) {
  const task = w.session && w.session.task;
  if (!task && !w.step_text) return null;
  return h("div.waiting-context", { dataset: { testid: "waiting-context" } },
    task ? h("p", h("span.hint", "Task: "), task) : null,
    w.step_text ? h("p", h("span.hint", `Step ${w.iteration + 1} said: `), w.step_text) : null);
}

function question(w) {
  const text = h("input", { name: "answer", placeholder: "your answer", "aria-label": "Answer to: " + w.question,
    dataset: { testid: "answer-text" } });
  const send = (answer) => act(`/api/sessions/${w.session_id}/answer`,
    { text: answer, tool_call_id: w.tool_call_id }, "answer sent", w.tool_call_id);
  return [
    h("p.waiting-question", { dataset: { testid: "question" } }, w.question),
    w.choices ? h("div.tool-actions", w.choices.map((choice) => h("button", { type: "button",
      dataset: { testid: "answer-choice" }, onclick: () => send(choice) }, choice))) : null,
    h("form.tool-actions", { onsubmit: (e) => {
      e.preventDefault();
      if (text.value.trim()) send(text.value);
    } }, text, h("button.primary", { type: "submit", dataset: { testid: "answer-submit" } }, "Answer")),
  ];
}

function approval(w) {
  const reason = h("input", { name: "reason", placeholder: "reason (told to the model)",
    "aria-label": "Reason for denying " + w.tool });
  const args = argsEditor(w.args, { tool: w.tool, testid: "waiting-args" });
  const approve = () => {
    const body = args.approval();
    if (body) act(`/api/tool-calls/${w.tool_call_id}/approve`, body, body.args ? "approved with your args" : "approved",
      w.tool_call_id);
  };
  return [
    h("p", "Run ", h("strong", w.tool), "?"),
    args.root,
    h("div.tool-actions",
      h("button", { type: "button", dataset: { testid: "waiting-approve" }, onclick: approve }, "Approve"),
      h("button.danger", { type: "button", dataset: { testid: "waiting-deny" },
        onclick: () => act(`/api/tool-calls/${w.tool_call_id}/deny`, reason.value ? { reason: reason.value } : {},
          "denied", w.tool_call_id) }, "Deny"),
      reason),
  ];
}

function result(w) {
  const text = h("textarea", { name: "result", rows: 2, placeholder: "result: JSON or plain text",
    "aria-label": "Result of " + w.tool });
  return [
    h("p", h("strong", w.tool), " waits for its result"),
    h("pre.tool-json", JSON.stringify(w.args, null, 2)),
    h("form.tool-actions", { onsubmit: (e) => {
      e.preventDefault();
      let value = text.value;
      try { value = JSON.parse(text.value); } catch (err) { /* plain text is a fine result */ }
      act(`/api/tool-calls/${w.tool_call_id}/result`, { result: value }, "result posted", w.tool_call_id);
    } }, text, h("button", { type: "submit" }, "Post result")),
  ];
}

// A call settled meanwhile (another tab, someone else, its timeout) is said so
// in plain words (components/settled.js), and its card goes with the reload.
async function act(path, body, done, callId) {
  try {
    await post(path, body);
    toast(done);
  } catch (err) {
    toast(await refusedWords(err, callId), true);
  }
  scheduleReload(300);
}

// Live changes reload at most every second: a busy service does not keep the page reloading.
function scheduleReload(delay = 1000) {
  if (reloadTimer) return;
  reloadTimer = setTimeout(() => {
    reloadTimer = null;
    load().catch((err) => toast("Could not load: " + err.message, true));
  }, delay);
}

registerPage({
  name: "needs_you",
  nav: { label: "Needs you", href: "#/needs-you", order: 15 },
  match: (parts) => (parts[0] === "needs-you" ? {} : null),
  mount,
  enter() {},
  rooms: () => ["all"],
  catchUp: reload,
  on: {
    tool_call: () => scheduleReload(),
  },
});
