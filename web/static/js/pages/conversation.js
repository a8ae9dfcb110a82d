// One conversation: its messages live, its participants, and a box to post.
// Catch-up reads from the cursor (the last message read over HTTP); live
// messages do not move it, since they may stand beyond messages this page never
// received (it was on another view, or disconnected).
// A link may point at one message (#/conversation/ID?message=MID, from search):
// once the messages are read, that one is marked and scrolled to.
// A question an agent asked (ask_user) is answered only through its own
// buttons and answer box; the message box at the bottom always posts a plain
// message (answers: false), so free text never silently becomes an answer.
// Once a question is answered (an answer message names it, or its tool call is
// no longer waiting) it shows the answer and offers no buttons.
// Agents show by their session's name (the API adds it), else by their tag.
import { get, post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { scheduleCatchUp } from "../core/live.js";
import { short, stepNumber, tag, when } from "../core/format.js";
import { registerPage } from "../core/registry.js";
import { toast } from "../core/toast.js";

let ui = null;
let current = fresh(null, null);

// questions: tool_call_id -> its box in the transcript; answers: tool_call_id ->
// the answer seen (it may arrive before its question is drawn); names: session_id -> name.
function fresh(id, linked) {
  return { id, messages: new Map(), cursor: null, linked, questions: new Map(), answers: new Map(),
    names: new Map() };
}

function mount(section) {
  const text = h("input", { name: "text", required: true, "aria-label": "Message",
    placeholder: "Write to everyone in this conversation…", dataset: { testid: "post-text" } });
  const error = h("p.form-error", { id: "post-error", role: "alert" });
  ui = {
    text,
    title: h("h1", { id: "c-title" }),
    messages: h("ol.messages", { dataset: { testid: "messages" } }),
    empty: h("p.empty", "No messages yet. Agents in this conversation post each step here; "
      + "your messages reach them as guidance."),
    participants: h("ul.plain", { dataset: { testid: "participants" } }),
    nobody: h("p.empty", "Nobody yet. Start an agent with this conversation selected."),
    missing: h("p.empty", { hidden: true }),
  };
  const form = h("form.inline", { id: "post-form", dataset: { testid: "post-form" }, onsubmit: async (e) => {
    e.preventDefault();
    error.textContent = "";
    try {
      const posted = await post(`/api/conversations/${current.id}/messages`, { text: text.value, answers: false });
      addMessage(posted.message);
      text.value = "";
      const n = posted.deliveries.length;
      toast(n ? `Sent to ${n} agent session${n > 1 ? "s" : ""}` : "Sent (no agents in this conversation yet)");
    } catch (err) {
      error.textContent = err.message;
    }
  } }, text, h("button.primary", { type: "submit", dataset: { testid: "post-submit" } }, "Send"));
  const note = h("p.hint", { dataset: { testid: "post-note" } }, "A message here reaches every agent in this "
    + "conversation as guidance; it never answers a question. Answer a question with its own buttons or box.");
  ui.body = h("div.columns",
    h("div.panel.grow", ui.title, ui.messages, ui.empty, form, note, error),
    h("div.panel.side", h("h2", "Participants"), ui.participants, ui.nobody));
  replace(section, h("a.back", { href: "#/conversations" }, "← all conversations"), ui.missing, ui.body);
}

const keyOf = (m) => m.created_at + " " + m.message_id;

function addMessage(m) {
  if (current.messages.has(m.message_id) || m.conversation_id !== current.id) return;
  current.messages.set(m.message_id, m);
  if ("name" in m && m.session_id) current.names.set(m.session_id, m.name);  // listed rows carry it, live ones not
  const who = m.sender_type === "agent"
    ? [h("a.msg-who", { href: "#/session/" + m.session_id, dataset: { session: m.session_id || "" } },
      whoIs(m)), ` · step ${stepNumber(m.iteration)}`]
    : [m.user_id || "user"];
  const li = h("li." + m.sender_type, { dataset: { key: keyOf(m), message: m.message_id, testid: "message" } },
    h("div.msg-head", ...who, " · ", when(m.created_at)), h("div.msg-text", m.text || ""), questionPart(m));
  const later = [...ui.messages.children].find((n) => n.dataset.key > li.dataset.key);
  ui.messages.insertBefore(li, later || null);
  ui.empty.hidden = true;
  if (!later) li.scrollIntoView({ block: "nearest" });
  const answered = m.event_type === "answer" && m.data && m.data.tool_call_id;
  if (answered) settle(m.data.tool_call_id, `answered: “${m.text}”` + (m.user_id ? ` by ${m.user_id}` : ""));
  if (m.sender_type === "agent" && !current.names.has(m.session_id)) scheduleNames();
}

function whoIs(m) {
  const data = m.data || {};
  return current.names.get(m.session_id) || m.name || (data.session_id === m.session_id && data.name)
    || tag(m.agent_id || "");
}

// A question an agent asked (ask_user; a child's, in its root's conversation): a
// link to the asking session, its choices as buttons and its own answer box,
// each naming the question (data.tool_call_id), so no other question is answered.
function questionPart(m) {
  const data = m.data || {};
  if (m.event_type !== "question" || data.kind !== "question") return null;
  const id = data.tool_call_id || m.message_id;
  const child = data.child;
  const text = h("input", { name: "answer", required: true, placeholder: "your answer",
    "aria-label": "Answer to: " + (data.question || m.text), dataset: { testid: "question-text" } });
  const actions = h("div.msg-question", { dataset: { testid: "question-actions" } },
    (data.choices || []).map((choice) => h("button", { type: "button", dataset: { testid: "message-choice" },
      onclick: () => answer(id, choice) }, choice)),
    h("form.inline", { onsubmit: (e) => {
      e.preventDefault();
      if (text.value.trim()) answer(id, text.value);
    } }, text, h("button", { type: "submit", dataset: { testid: "question-submit" } }, "Answer")));
  const state = h("p.hint", { role: "status", dataset: { testid: "question-state" } });
  const box = h("div", { dataset: { testid: "message-question", call: id } },
    child ? h("a", { href: `#/session/${child.session_id}` }, "open " + (child.name || tag(child.agent_id))) : null,
    actions, state);
  current.questions.set(id, { box, actions, state, settled: false });
  if (current.answers.has(id)) queueMicrotask(() => settle(id, current.answers.get(id)));
  return box;
}

// The question is closed: say how, and take its buttons and box away.
function settle(id, words) {
  current.answers.set(id, words);
  const q = current.questions.get(id);
  if (!q || q.settled) return;
  q.settled = true;
  const hadFocus = q.actions.contains(document.activeElement);
  q.actions.remove();
  if (hadFocus) ui.text.focus();  // its box went: the message box, not the page body, has focus
  q.state.textContent = words;
  q.box.closest("li")?.classList.add("answered");
}

async function answer(id, text) {
  const q = current.questions.get(id);
  q.actions.querySelectorAll("button, input").forEach((n) => { n.disabled = true; });
  try {
    const call = await get("/api/tool-calls/" + encodeURIComponent(id));
    if (call.status !== "waiting_result") {  // closed meanwhile: post nothing, not even a plain message
      settle(id, closedWords(call));
      toast("That question was closed already", true);
      return;
    }
    const posted = await post(`/api/conversations/${current.id}/messages`, { text, data: { tool_call_id: id } });
    addMessage(posted.message);
    if (posted.answer) settle(id, `answered: “${text}”`);
    else settle(id, "closed before this answer arrived (it was sent as a plain message)");
    toast(posted.answer ? "Answer sent" : "That question was closed already", !posted.answer);
  } catch (err) {
    q.actions.querySelectorAll("button, input").forEach((n) => { n.disabled = false; });
    toast(err.message, true);
  }
}

function closedWords(call) {
  const result = call.result || {};
  if (result.timed_out) return `timed out; answered with its default “${result.answer}”`;
  if (typeof result.answer === "string") return `answered: “${result.answer}”`
    + (result.answered_by ? ` by ${result.answered_by}` : "");
  return "closed unanswered (" + call.status + ")";
}

// Questions drawn as open whose answer this page has not seen (answered while
// it was away, before the answer message existed, or timed out): ask their calls.
async function checkOpenQuestions(id) {
  const open = [...current.questions].filter(([, q]) => !q.settled).map(([call]) => call);
  for (const call of open) {
    const row = await get("/api/tool-calls/" + encodeURIComponent(call)).catch(() => null);
    if (id !== current.id) return;
    if (row && row.status !== "waiting_result") settle(call, closedWords(row));
  }
}

let namesTimer = null;

// A sender this page has no name for (it joined after the participants were read): read them again, once a second at most.
function scheduleNames() {
  if (namesTimer || !current.id) return;
  namesTimer = setTimeout(() => {
    namesTimer = null;
    loadParticipants(current.id).catch(() => {});
  }, 1000);
}

async function loadParticipants(id) {
  const participants = await get(`/api/conversations/${encodeURIComponent(id)}/participants`, { limit: 500 });
  if (id !== current.id) return;
  showParticipants(participants.participants);
}

function showParticipants(list) {
  for (const p of list) if (p.kind === "agent") current.names.set(p.session_id, p.name || null);
  replace(ui.participants, list.map((p) => h("li", p.kind === "agent"
    ? ["agent ", h("a", { href: "#/session/" + p.session_id }, p.name || tag(p.agent_id)),
      h("small", " session " + short(p.session_id))]
    : ["user " + p.user_id])));
  ui.nobody.hidden = list.length > 0;
  ui.messages.querySelectorAll("a.msg-who").forEach((a) => {
    if (!current.names.has(a.dataset.session)) current.names.set(a.dataset.session, null);  // looked up: none
    const name = current.names.get(a.dataset.session);
    if (name && a.textContent !== name) a.textContent = name;
  });
}

async function load() {
  const id = current.id;
  let conversation;
  let participants;
  try {
    [conversation, participants] = await Promise.all([get("/api/conversations/" + encodeURIComponent(id)),
      get(`/api/conversations/${encodeURIComponent(id)}/participants`, { limit: 500 })]);
  } catch (err) {
    if (id !== current.id) return;
    if (err.status === 404 || err.status === 400) {
      ui.body.hidden = true;
      ui.missing.hidden = false;
      ui.missing.textContent = `There is no conversation ${id}.`;
      return;
    }
    throw err;
  }
  if (id !== current.id) return;
  ui.body.hidden = false;
  ui.title.textContent = conversation.title || "untitled conversation";
  showParticipants(participants.participants);
  for (;;) {
    const data = await get(`/api/conversations/${id}/messages`, { limit: 500, after: current.cursor });
    if (id !== current.id) return;
    data.messages.forEach(addMessage);
    if (data.messages.length) current.cursor = data.messages[data.messages.length - 1].message_id;
    if (data.messages.length < 500) break;
  }
  showLinked();
  await checkOpenQuestions(id);
}

function showLinked() {
  const id = current.linked;
  current.linked = null;
  const li = id ? [...ui.messages.children].find((n) => n.dataset.message === id) : null;
  if (!li) return;
  ui.messages.querySelectorAll(".linked").forEach((n) => n.classList.remove("linked"));
  li.classList.add("linked");
  li.tabIndex = -1;
  li.scrollIntoView({ block: "center" });
  li.focus({ preventScroll: true });
}

registerPage({
  name: "conversation",
  match: (parts) => (parts[0] === "conversation" && parts[1] ? { id: parts[1] } : null),
  mount,
  enter(params) {
    const linked = params.query.get("message");
    if (params.id === current.id) {
      current.linked = linked;  // the catch-up that follows shows it
      return;
    }
    current = fresh(params.id, linked);
    replace(ui.messages);
    ui.title.textContent = "";
    ui.empty.hidden = false;
    ui.body.hidden = true;
    ui.missing.hidden = true;
  },
  rooms: (params) => ["conversation:" + params.id],
  catchUp: () => load().catch((err) => toast("Could not load: " + err.message, true)),
  // A message too big for an event (domain/events.py) is read with the catch-up.
  on: { conversation_message: (m) => (m.omitted ? scheduleCatchUp() : addMessage(m)) },
});
