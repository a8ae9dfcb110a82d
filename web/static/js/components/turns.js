// A session's timeline grouped by turn (GET /api/sessions/<id>/turns): a turn is
// the run of steps from a trigger (the task, a user's message, a sub-agent's
// result, an answer) until the agent waits or finishes.  Above the newest shown
// step of each turn goes a header: what started it, how it ended, its summary,
// and a button that folds its steps away (and back).
//
// The turns are read after every catch-up of the session, and again when the
// session's state changes (a turn ends when the session waits or finishes; its
// summary may come a moment later, so an open turn of a session that is no
// longer running is read again, a few times, until it has ended).
import { get } from "../core/api.js";
import { h } from "../core/dom.js";
import { stepNumber } from "../core/format.js";
import { registerLiveEvent, registerSessionHook, registerTimelineHook } from "../core/registry.js";

const RETRY_MS = [500, 1500, 3000, 6000];

// loaded: the turns were read once for this session (before that, every step is "unknown")
// hooked: the page's read of the session reached this component (its turns are read after that)
const view = { sessionId: null, list: null, turns: [], loaded: false, hooked: false, collapsed: new Set(), status: null,
  readAt: null, retry: 0, timer: null };

function triggerWords(turn) {
  const quoted = turn.trigger_text ? ` “${turn.trigger_text}”` : "";
  switch (turn.trigger_kind) {
    case "create": return "started by the task";
    case "fork": return "started as a fork";
    case "guidance": case "message": return "a message:" + quoted;
    case "child_result": return "a sub-agent's result";
    case "answer": return "an answer:" + quoted;
    default: return "resumed";
  }
}

function endWords(turn) {
  if (turn.status === "open") return "in progress";
  const [status] = (turn.end_reason || "").split(":");
  return { waiting: "then waited for input", done: "then finished", error: "ended in an error",
    stopped: "then stopped" }[status] || "ended";
}

function header(turn) {
  const collapsed = view.collapsed.has(turn.turn);
  const steps = turn.last_iteration == null ? "" : turn.first_iteration === turn.last_iteration
    ? ` · step ${stepNumber(turn.first_iteration)}`
    : ` · steps ${stepNumber(turn.first_iteration)}–${stepNumber(turn.last_iteration)}`;
  const toggle = h("button.turn-toggle", { type: "button", "aria-expanded": String(!collapsed),
    "aria-label": `${collapsed ? "Show" : "Hide"} the steps of turn ${turn.turn + 1}`, dataset: { testid: "turn-toggle" },
    onclick: () => {
      if (view.collapsed.has(turn.turn)) view.collapsed.delete(turn.turn);
      else view.collapsed.add(turn.turn);
      draw();
      const again = view.list && view.list.querySelector(`li.turn-head[data-turn="${turn.turn}"] .turn-toggle`);
      if (again) again.focus();
    } }, collapsed ? "▸" : "▾");
  return h("li.turn-head", { dataset: { testid: "turn", turn: turn.turn, status: turn.status } },
    h("div.step-head", toggle, h("strong", `Turn ${turn.turn + 1}`), ` · ${triggerWords(turn)} · ${endWords(turn)}`,
      steps),
    turn.summary ? h("div.turn-summary", { dataset: { testid: "turn-summary" } }, turn.summary) : null);
}

function turnOf(iteration) {
  return view.turns.find((t) => iteration >= t.first_iteration
    && (t.last_iteration == null || iteration <= t.last_iteration));
}

function draw() {
  const list = view.list;
  if (!list) return;
  list.querySelectorAll("li.turn-head").forEach((node) => node.remove());
  let unknown = false;
  const newest = new Map();  // turn -> its newest shown step (the list is newest first)
  for (const li of list.querySelectorAll("li.step")) {
    const turn = turnOf(Number(li.dataset.iteration));
    if (!turn) { unknown = true; delete li.dataset.turn; li.classList.remove("turn-hidden"); continue; }
    li.dataset.turn = turn.turn;
    li.classList.toggle("turn-hidden", view.collapsed.has(turn.turn));
    if (!newest.has(turn.turn)) newest.set(turn.turn, li);
  }
  for (const turn of view.turns) {
    const li = newest.get(turn.turn);
    if (!li) continue;
    const head = header(turn);
    head.dataset.key = li.dataset.key + "|~";  // sorts just above its newest step
    li.before(head);
  }
  const last = view.turns[view.turns.length - 1];
  if ((unknown && view.loaded) || (last && last.status === "open" && view.status && view.status !== "running")) later();
}

async function load(sessionId) {
  const page = await get(`/api/sessions/${sessionId}/turns`, { limit: 1000 }).catch(() => null);
  if (!page || sessionId !== view.sessionId) return;
  view.turns = page.turns;
  view.loaded = true;
  draw();
}

// Read the turns again soon (a new turn, or an ended one whose row is still being written).
function later() {
  if (view.timer || view.retry >= RETRY_MS.length) return;
  const id = view.sessionId;
  view.timer = setTimeout(() => { view.timer = null; view.retry += 1; if (id === view.sessionId) load(id); },
    RETRY_MS[view.retry]);
}

function follow(sessionId) {
  if (sessionId === view.sessionId) return;
  clearTimeout(view.timer);
  Object.assign(view, { sessionId, turns: [], loaded: false, hooked: false, collapsed: new Set(), status: null,
    readAt: null, retry: 0, timer: null });
}

registerTimelineHook(({ list, sessionId }) => {
  follow(sessionId);
  view.list = list;
  draw();
});

registerSessionHook(async (sessionId, snapshot) => {
  follow(sessionId);
  view.hooked = true;
  view.retry = 0;
  view.readAt = snapshot ? snapshot.status : null;
  await load(sessionId);
});

registerLiveEvent("agent_state", (snapshot) => {
  if (!snapshot || snapshot.session_id !== view.sessionId) return;
  // readAt: the status when the turns were read; an event saying the same (a
  // running session's every step) is no change, and reading again is a double.
  if (snapshot.status !== (view.status ?? view.readAt)) {
    view.status = snapshot.status;
    // Before the page's read of the session reaches the session hook, its read of the
    // turns is still to come, after this event: reading now as well is a double.
    if (!view.hooked) return;
    view.retry = 0;
    load(view.sessionId);
  }
});
