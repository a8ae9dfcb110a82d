// One conversation: its messages live, its participants, and a box to post.
// Catch-up reads from the cursor (the last message read over HTTP); live
// messages do not move it, since they may stand beyond messages this page never
// received (it was on another view, or disconnected).
// A link may point at one message (#/conversation/ID?message=MID, from search):
// once the messages are read, that one is marked and scrolled to.
import { get, post } from "../core/api.js";
import { h, replace } from "../core/dom.js";
import { short, stepNumber, tag, when } from "../core/format.js";
import { registerPage } from "../core/registry.js";
import { toast } from "../core/toast.js";

let ui = null;
let current = { id: null, messages: new Map(), cursor: null, linked: null };

function mount(section) {
  const text = h("input", { name: "text", required: true, "aria-label": "Message",
    placeholder: "Write to everyone in this conversation…", dataset: { testid: "post-text" } });
  const error = h("p.form-error", { id: "post-error", role: "alert" });
  ui = {
    title: h("h2", { id: "c-title" }),
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
      const posted = await post(`/api/conversations/${current.id}/messages`, { text: text.value });
      addMessage(posted.message);
      text.value = "";
      const n = posted.deliveries.length;
      if (posted.answer) toast("Sent as the answer to the open question");
      else toast(n ? `Sent to ${n} agent session${n > 1 ? "s" : ""}` : "Sent (no agents in this conversation yet)");
    } catch (err) {
      error.textContent = err.message;
    }
  } }, text, h("button.primary", { type: "submit", dataset: { testid: "post-submit" } }, "Send"));
  ui.body = h("div.columns",
    h("div.panel.grow", ui.title, ui.messages, ui.empty, form, error),
    h("div.panel.side", h("h2", "Participants"), ui.participants, ui.nobody));
  replace(section, h("a.back", { href: "#/conversations" }, "← all conversations"), ui.missing, ui.body);
}

const keyOf = (m) => m.created_at + " " + m.message_id;

function addMessage(m) {
  if (current.messages.has(m.message_id) || m.conversation_id !== current.id) return;
  current.messages.set(m.message_id, m);
  const who = m.sender_type === "agent"
    ? [h("a", { href: "#/session/" + m.session_id }, tag(m.agent_id)), ` · step ${stepNumber(m.iteration)}`]
    : [m.user_id || "user"];
  const li = h("li." + m.sender_type, { dataset: { key: keyOf(m), message: m.message_id, testid: "message" } },
    h("div.msg-head", ...who, " · ", when(m.created_at)), h("div.msg-text", m.text || ""), questionPart(m));
  const later = [...ui.messages.children].find((n) => n.dataset.key > li.dataset.key);
  ui.messages.insertBefore(li, later || null);
  ui.empty.hidden = true;
  if (!later) li.scrollIntoView({ block: "nearest" });
}

// A question an agent asked (ask_user; a child's, in its root's conversation): a
// link to the asking session and its choices as buttons.  A reply here answers
// it (the server routes it), so a button just posts the choice, naming the question.
function questionPart(m) {
  const data = m.data || {};
  if (m.event_type !== "question" || data.kind !== "question") return null;
  const child = data.child;
  return h("div.msg-question", { dataset: { testid: "message-question" } },
    child ? h("a", { href: `#/session/${child.session_id}` }, "open " + (child.name || tag(child.agent_id))) : null,
    (data.choices || []).map((choice) => h("button", { type: "button", dataset: { testid: "message-choice" },
      onclick: () => reply(choice, { tool_call_id: data.tool_call_id }) }, choice)),
    h("span.hint", " or reply below"));
}

async function reply(text, data) {
  try {
    const posted = await post(`/api/conversations/${current.id}/messages`, { text, data });
    addMessage(posted.message);
    toast(posted.answer ? "Answer sent" : "Sent (that question was closed already)");
  } catch (err) {
    toast(err.message, true);
  }
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
  replace(ui.participants, participants.participants.map((p) => h("li", p.kind === "agent"
    ? ["agent ", h("a", { href: "#/session/" + p.session_id }, tag(p.agent_id)),
      h("small", " session " + short(p.session_id))]
    : ["user " + p.user_id])));
  ui.nobody.hidden = participants.participants.length > 0;
  for (;;) {
    const data = await get(`/api/conversations/${id}/messages`, { limit: 500, after: current.cursor });
    if (id !== current.id) return;
    data.messages.forEach(addMessage);
    if (data.messages.length) current.cursor = data.messages[data.messages.length - 1].message_id;
    if (data.messages.length < 500) break;
  }
  showLinked();
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
    current = { id: params.id, messages: new Map(), cursor: null, linked };
    replace(ui.messages);
    ui.title.textContent = "";
    ui.empty.hidden = false;
    ui.body.hidden = true;
    ui.missing.hidden = true;
  },
  rooms: (params) => ["conversation:" + params.id],
  catchUp: () => load().catch((err) => toast("Could not load: " + err.message, true)),
  on: { conversation_message: (m) => addMessage(m) },
});
