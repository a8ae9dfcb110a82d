// The agentsvc dashboard: plain JS, no build step.
//
// Live model: on every (re)connect the page subscribes to the rooms of the
// current view, then catches up over HTTP from its cursor (the end of the
// unbroken run of steps, the last message read over HTTP), and merges live events.
// Everything is keyed by row id, so an event seen both live and over HTTP is
// shown once.  Each event carries {stream, seq, epoch}: a gap in seq or a new
// epoch (app.py restarted) triggers another catch-up.
"use strict";

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
};
const short = (id) => (id ? id.slice(-8) : "");
const clock = (iso) => (iso ? new Date(iso).toLocaleTimeString() : "");

const page = {
  view: null, sessionId: null, conversationId: null, rooms: [],
  agents: new Map(),      // agent_id -> latest snapshot
  session: null,          // snapshot of the open session
  steps: new Map(),       // step id -> step (open session)
  messages: new Map(),    // message id -> message (open conversation)
  messageCursor: null,    // the last message read over HTTP (live ones do not move it)
  streams: new Map(),     // stream -> {epoch, seq}
  conversations: [],
  catchUpTimer: null,
};

// ---- HTTP -------------------------------------------------------------------

const TOKEN_KEY = "agentsvc.apiToken";

async function api(method, path, body, retried) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) options.headers["Authorization"] = "Bearer " + token;
  let response;
  try {
    response = await fetch(path, options);
  } catch (err) {
    throw new Error("the service cannot be reached (" + err.message + ")");
  }
  if (response.status === 401 && !retried) {
    // The service was started with an API token: ask once, remember it here.
    const given = window.prompt("This service needs its API token to make changes:");
    if (given) {
      localStorage.setItem(TOKEN_KEY, given.trim());
      return api(method, path, body, true);
    }
  }
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = data.error ? data.error.message : response.status + " " + response.statusText;
    throw new Error(message);
  }
  return data;
}

function toast(text, bad) {
  const node = el("div", "toast" + (bad ? " bad" : ""), text);
  $("toasts").appendChild(node);
  setTimeout(() => node.remove(), bad ? 8000 : 4000);
}

// ---- live events ------------------------------------------------------------

const socket = io({ transports: ["websocket", "polling"] });

socket.on("connect", () => {
  setLive(true);
  page.rooms = [];
  subscribeForView().then(catchUp);
});
socket.on("disconnect", () => setLive(false));
socket.on("connect_error", () => setLive(false));

function setLive(on) {
  const badge = $("live");
  badge.className = "live " + (on ? "on" : "off");
  badge.textContent = on ? "live" : "reconnecting…";
}

function roomsForView() {
  if (page.view === "agents") return ["all"];
  if (page.view === "session") return ["session:" + page.sessionId];
  if (page.view === "conversation") return ["conversation:" + page.conversationId];
  return [];
}

// Resolves once the server has joined the rooms.  Catching up only then closes
// a gap: an event relayed after the HTTP read but before the join would
// otherwise reach neither path (and seq cannot show a gap before the first
// event seen).
async function subscribeForView() {
  const wanted = roomsForView();
  const stale = page.rooms.filter((r) => !wanted.includes(r));
  if (stale.length && socket.connected) socket.emit("unsubscribe", { rooms: stale });
  page.rooms = wanted;
  if (!wanted.length || !socket.connected) return;  // "connect" subscribes and catches up
  try {
    await socket.timeout(5000).emitWithAck("subscribe", { rooms: wanted });
  } catch (err) {
    scheduleCatchUp();  // no answer in time: read again shortly, in case events slipped by
  }
}

function sequenced(event) {
  const last = page.streams.get(event.stream);
  page.streams.set(event.stream, { epoch: event.epoch, seq: event.seq });
  if (last && (last.epoch !== event.epoch || event.seq !== last.seq + 1)) scheduleCatchUp();
}

function scheduleCatchUp() {
  clearTimeout(page.catchUpTimer);
  page.catchUpTimer = setTimeout(catchUp, 200);
}

socket.on("agent_state", (event) => {
  sequenced(event);
  mergeSnapshot(event.data);
});
socket.on("agent_step", (event) => {
  sequenced(event);
  const step = event.data;
  const agent = page.agents.get(step.agent_id);
  if (agent && agent.session_id === step.session_id && step.text) {
    agent.last_text = step.text;
    renderAgentRow(agent);
  }
  if (page.view === "session" && step.session_id === page.sessionId) addStep(step);
});
socket.on("conversation_message", (event) => {
  sequenced(event);
  if (page.view === "conversation" && event.data.conversation_id === page.conversationId) addMessage(event.data);
});
socket.on("action", (event) => {
  sequenced(event);
  const action = event.data;
  if (page.view === "session" && action.session_id === page.sessionId && action.type !== "create") {
    if (action.status === "failed") toast(action.type + " failed: " + action.error, true);
    else toast(action.type + " applied");
  }
});

async function catchUp() {
  try {
    if (page.view === "agents") await loadAgents();
    if (page.view === "session") await loadSession();
    if (page.view === "conversation") await loadConversation();
  } catch (err) {
    toast("Could not load: " + err.message, true);
  }
}

// ---- agents -----------------------------------------------------------------

function mergeSnapshot(snapshot) {
  const known = page.agents.get(snapshot.agent_id);
  let newer = true;  // a newer session of the agent replaces the row; within a session, a newer save
  if (known && known.session_id !== snapshot.session_id) newer = (snapshot.created_at || "") >= (known.created_at || "");
  else if (known) newer = (snapshot.updated_at || "") >= (known.updated_at || "");
  if (newer) {
    const lastText = snapshot.result && snapshot.result.text;
    snapshot.last_text = lastText || (known && known.session_id === snapshot.session_id ? known.last_text : "");
    page.agents.set(snapshot.agent_id, snapshot);
    renderAgentRow(snapshot);
  }
  if (page.view === "session" && snapshot.session_id === page.sessionId) {
    if (!page.session || (snapshot.updated_at || "") >= (page.session.updated_at || "")) renderSession(snapshot);
  }
}

async function loadAgents() {
  const data = await api("GET", "/api/agents?limit=200");
  data.agents.forEach(mergeSnapshot);
  $("agents-empty").hidden = page.agents.size > 0;
}

function renderAgentRow(agent) {
  if (page.view !== "agents") return;
  let row = document.querySelector(`tr[data-agent="${agent.agent_id}"]`);
  if (!row) {
    row = el("tr", "clickable");
    row.dataset.agent = agent.agent_id;
    row.setAttribute("data-testid", "agent-row");
    $("agents-body").prepend(row);
    $("agents-empty").hidden = true;
  }
  row.onclick = () => (location.hash = "#/session/" + agent.session_id);
  row.replaceChildren(
    cell(el("code", null, short(agent.agent_id)), agent.task ? el("div", "hint", agent.task) : null),
    cell(el("span", null, agent.moniker || "")),
    cell(badge(agent.status)),
    cell(el("span", null, agent.iteration >= 0 ? String(agent.iteration) : "–")),
    Object.assign(el("td", "text", agent.last_text || ""), { title: agent.last_text || "" }),
    cell(el("a", null, "open ›")),
  );
}

function cell(...children) {
  const td = el("td");
  children.filter(Boolean).forEach((c) => td.appendChild(c));
  return td;
}

function badge(status) {
  return el("span", "badge " + (status || ""), status || "unknown");
}

// ---- create form ------------------------------------------------------------

async function loadCreateForm() {
  const [monikers, conversations] = await Promise.all([
    api("GET", "/api/monikers"), api("GET", "/api/conversations?limit=200"),
  ]);
  const select = $("create-moniker");
  const chosen = select.value;
  select.replaceChildren(...monikers.monikers.map((m) => Object.assign(el("option", null, m.name), { value: m.name })));
  select.value = chosen || (monikers.monikers.some((m) => m.name === "joke") ? "joke" : select.value);
  select.onchange = () => {
    const m = monikers.monikers.find((x) => x.name === select.value);
    $("moniker-help").textContent = m ? m.description : "";
  };
  select.onchange();
  fillConversationSelect(conversations.conversations);
}

function fillConversationSelect(conversations) {
  const select = $("create-conversation");
  const chosen = select.value;
  const options = [Object.assign(el("option", null, "— none —"), { value: "" })];
  conversations.forEach((c) => options.push(
    Object.assign(el("option", null, (c.title || "untitled") + " · " + short(c.conversation_id)), { value: c.conversation_id })));
  select.replaceChildren(...options);
  select.value = chosen;
}

$("create-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = e.target;
  const error = form.querySelector(".form-error");
  error.textContent = "";
  const config = { interval_s: Number(form.interval_s.value || 1), stop_on_done: form.stop_on_done.checked };
  if (form.max_steps.value) config.max_steps = Number(form.max_steps.value);
  const body = { moniker: form.moniker.value, task: form.task.value, config };
  if (form.conversation_id.value) body.conversation_id = form.conversation_id.value;
  try {
    const made = await api("POST", "/api/agents", body);
    toast("Agent started");
    location.hash = "#/session/" + made.session_id;
  } catch (err) {
    error.textContent = err.message;
  }
});

// ---- one session ------------------------------------------------------------

async function loadSession() {
  const id = page.sessionId;
  const snapshot = await api("GET", "/api/sessions/" + id);
  if (id !== page.sessionId) return;
  mergeSnapshot(snapshot);
  if (!page.session || (snapshot.updated_at || "") >= (page.session.updated_at || "")) renderSession(snapshot);
  // Catch up from the cursor: every step after the last one of an unbroken
  // run from iteration 0.  Not after the newest shown: a step that arrived live
  // may stand beyond steps this page never received (it was on another view,
  // or disconnected), and those would never be read.
  for (;;) {
    const after = contiguousIteration();
    const page_ = await api("GET", `/api/agent-steps?session_id=${id}&min_iteration=${after + 1}&limit=500`);
    if (id !== page.sessionId) return;
    page_.steps.forEach(addStep);
    if (page_.steps.length < 500) break;
  }
  if (typeof toolCalls !== "undefined") await toolCalls.catchUp(id);  // web/static/tool_calls.js
}

function contiguousIteration() {
  const have = new Set();
  page.steps.forEach((s) => have.add(s.iteration));
  let last = -1;
  while (have.has(last + 1)) last += 1;
  return last;
}

function renderSession(s) {
  page.session = s;
  $("s-id").textContent = s.session_id;
  $("s-agent").textContent = s.agent_id;
  $("s-moniker").textContent = s.moniker || "";
  const status = $("s-status");
  status.className = "badge " + s.status;
  status.textContent = s.status;
  $("s-reason").textContent = s.status_reason ? "(" + s.status_reason + ")" : "";
  $("s-iteration").textContent = s.iteration >= 0 ? String(s.iteration) : "no steps yet";
  $("s-task").textContent = s.task || "—";
  const conv = $("s-conversation");
  conv.replaceChildren(s.conversation_id
    ? Object.assign(el("a", null, short(s.conversation_id)), { href: "#/conversation/" + s.conversation_id })
    : document.createTextNode("—"));
  $("s-error").textContent = s.last_error ? "Last error: " + s.last_error : "";
  const over = ["stopped", "done"].includes(s.status);
  document.querySelector('[data-verb="pause"]').disabled = over || s.status === "paused";
  document.querySelector('[data-verb="resume"]').disabled = over || s.status === "running";
  document.querySelector('[data-verb="destroy"]').disabled = over;
}

function addStep(step) {
  if (page.steps.has(step.id)) return;
  page.steps.set(step.id, step);
  const li = el("li", step.status);
  li.dataset.iteration = step.iteration;
  li.setAttribute("data-testid", "step");
  li.appendChild(el("div", "step-head",
    `#${step.iteration} · ${step.step_token || ""} → ${step.next_step_token || ""} · ${clock(step.created_at)}` +
    (step.latency_ms != null ? ` · ${Math.round(step.latency_ms)} ms` : "")));
  if (step.text) li.appendChild(el("div", "step-text", step.text));
  if (step.error) li.appendChild(el("div", "step-error", step.error));
  (step.guidance || []).forEach((g) => {
    const from = g.source && g.source.conversation_id ? ` (message from ${g.source.sender || "user"})` : "";
    li.appendChild(el("div", "guidance", "guidance" + from + ": " + g.text));
  });
  const list = $("steps");
  const later = [...list.children].find((n) => Number(n.dataset.iteration) > step.iteration);
  list.insertBefore(li, later || null);
  if (typeof toolCalls !== "undefined") toolCalls.stepAdded(step, li);  // web/static/tool_calls.js
  $("steps-empty").hidden = true;
  $("s-count").textContent = page.steps.size + " shown, updating live";
}

document.querySelectorAll("[data-verb]").forEach((button) => {
  button.addEventListener("click", () => control(button.dataset.verb, {}));
});

$("interrupt-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = e.target.guidance;
  if (await control("interrupt", { guidance: input.value })) input.value = "";
});

async function control(verb, extra) {
  const s = page.session;
  if (!s) return false;
  try {
    await api("POST", `/api/agents/${s.agent_id}/${verb}`, { session_id: s.session_id, ...extra });
    toast(verb + " requested");
    return true;
  } catch (err) {
    toast(verb + " failed: " + err.message, true);
    return false;
  }
}

// ---- conversations ----------------------------------------------------------

async function loadConversations() {
  const data = await api("GET", "/api/conversations?limit=200");
  page.conversations = data.conversations;
  $("conversations").replaceChildren(...data.conversations.map((c) => {
    const li = el("li");
    const a = Object.assign(el("a"), { href: "#/conversation/" + c.conversation_id });
    a.appendChild(el("strong", null, c.title || "untitled"));
    a.appendChild(el("div", "hint", "started " + new Date(c.created_at).toLocaleString()));
    if (c.tags && c.tags.length) a.appendChild(el("div", "hint", c.tags.join(", ")));
    li.appendChild(a);
    return li;
  }));
  $("conversations-empty").hidden = data.conversations.length > 0;
}

$("conversation-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = e.target;
  const error = form.querySelector(".form-error");
  error.textContent = "";
  const tags = form.tags.value.split(",").map((t) => t.trim()).filter(Boolean);
  try {
    const made = await api("POST", "/api/conversations", { title: form.title.value, tags });
    form.reset();
    location.hash = "#/conversation/" + made.conversation_id;
  } catch (err) {
    error.textContent = err.message;
  }
});

async function loadConversation() {
  const id = page.conversationId;
  const [conversation, participants] = await Promise.all([
    api("GET", "/api/conversations/" + id), api("GET", `/api/conversations/${id}/participants?limit=500`),
  ]);
  if (id !== page.conversationId) return;
  $("c-title").textContent = conversation.title || "untitled conversation";
  renderParticipants(participants.participants);
  // Catch up from the cursor: the last message read over HTTP.  Messages that
  // arrive live do not move it, since they may stand beyond messages this page
  // never received (it was on another view, or disconnected).
  for (;;) {
    const after = page.messageCursor;
    const data = await api("GET", `/api/conversations/${id}/messages?limit=500` + (after ? "&after=" + after : ""));
    if (id !== page.conversationId) return;
    data.messages.forEach(addMessage);
    if (data.messages.length) page.messageCursor = data.messages[data.messages.length - 1].message_id;
    if (data.messages.length < 500) break;
  }
}

function renderParticipants(rows) {
  $("participants").replaceChildren(...rows.map((p) => {
    const li = el("li");
    if (p.kind === "agent") {
      li.appendChild(document.createTextNode("agent "));
      li.appendChild(Object.assign(el("a", null, short(p.agent_id)), { href: "#/session/" + p.session_id }));
      li.appendChild(el("small", null, " session " + short(p.session_id)));
    } else {
      li.textContent = "user " + p.user_id;
    }
    return li;
  }));
  $("participants-empty").hidden = rows.length > 0;
}

const messageKey = (m) => m.created_at + " " + m.message_id;

function addMessage(m) {
  if (page.messages.has(m.message_id)) return;
  page.messages.set(m.message_id, m);
  const li = el("li", m.sender_type);
  li.dataset.key = messageKey(m);
  li.setAttribute("data-testid", "message");
  const who = m.sender_type === "agent"
    ? `agent ${short(m.agent_id)} · step ${m.iteration}` : (m.user_id || "user");
  li.appendChild(el("div", "msg-head", who + " · " + clock(m.created_at)));
  li.appendChild(el("div", "msg-text", m.text || ""));
  const list = $("messages");
  const later = [...list.children].find((n) => n.dataset.key > li.dataset.key);
  list.insertBefore(li, later || null);
  $("messages-empty").hidden = true;
  if (!later) li.scrollIntoView({ block: "nearest" });
}

$("post-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = e.target.text;
  $("post-error").textContent = "";
  try {
    const posted = await api("POST", `/api/conversations/${page.conversationId}/messages`, { text: input.value });
    addMessage(posted.message);
    input.value = "";
    const n = posted.deliveries.length;
    toast(n ? `Sent to ${n} agent session${n > 1 ? "s" : ""}` : "Sent (no agents in this conversation yet)");
  } catch (err) {
    $("post-error").textContent = err.message;
  }
});

// ---- routing ----------------------------------------------------------------

function route() {
  const [, name, id] = (location.hash || "#/").split("?")[0].split("/");  // "?…" is for web/static/search.js
  const view = name === "session" && id ? "session"
    : name === "conversation" && id ? "conversation"
    : name === "conversations" ? "conversations" : "agents";
  document.querySelectorAll(".view").forEach((v) => (v.hidden = v.id !== "view-" + view));
  page.view = view;
  if (view === "session" && id !== page.sessionId) {
    page.sessionId = id;
    page.session = null;
    page.steps.clear();
    $("steps").replaceChildren();
    $("steps-empty").hidden = false;
    $("s-count").textContent = "";
  }
  if (view === "conversation" && id !== page.conversationId) {
    page.conversationId = id;
    page.messages.clear();
    page.messageCursor = null;
    $("messages").replaceChildren();
    $("messages-empty").hidden = false;
  }
  if (view === "agents") {
    $("agents-body").replaceChildren();
    page.agents.clear();
    loadCreateForm().catch((err) => toast("Could not load the form: " + err.message, true));
  }
  if (view === "conversations") loadConversations().catch((err) => toast("Could not load: " + err.message, true));
  subscribeForView().then(catchUp);
}

window.addEventListener("hashchange", route);
route();
