// Live events over Socket.IO, and catching up over HTTP.
//
// On every (re)connect the page subscribes to the rooms of the current view,
// then (once the server acknowledged) reads from its cursors over HTTP and
// merges live events by row id, so nothing is shown twice or missed.  Events
// carry {stream, seq, epoch}: a gap in seq or a new epoch (app.py restarted)
// triggers another catch-up.  "step_delta" (a step's model output while it is
// generated) is live only: nothing to catch up on, so its seq is not watched.
import { debouncer } from "./debounce.js";
import { $ } from "./dom.js";
import { liveHandlers } from "./registry.js";

const EPHEMERAL = ["step_delta"];
const streams = new Map();
let rooms = [];
let current = null;  // {rooms(), catchUp(), on}
let socket = null;

export function connect() {
  socket = io({ transports: ["websocket", "polling"] });
  socket.on("connect", () => {
    setLive(true);
    rooms = [];
    subscribe().then(catchUp);
  });
  socket.on("disconnect", () => setLive(false));
  socket.on("connect_error", () => setLive(false));
  const names = new Set(["agent_state", "agent_step", "action", "conversation_message", ...EPHEMERAL,
    ...liveHandlers.keys()]);
  for (const name of names) {
    socket.on(name, (event) => {
      if (!EPHEMERAL.includes(name)) sequenced(event);
      const handler = current && current.on && current.on[name];
      if (handler) handler(event.data, event);
      (liveHandlers.get(name) || []).forEach((h) => h(event.data, event));
    });
  }
}

function setLive(on) {
  const badge = $("#live");
  badge.className = "live " + (on ? "on" : "off");
  badge.textContent = on ? "live" : "reconnecting…";
}

// The view changed: follow its rooms, then catch it up.
export async function follow(view) {
  current = view;
  await subscribe();
  await catchUp();
}

// Resolves once the server has joined the rooms.  Catching up only then closes
// a gap: an event relayed after the HTTP read but before the join would
// otherwise reach neither path.
async function subscribe() {
  const wanted = current ? current.rooms() : [];
  const stale = rooms.filter((r) => !wanted.includes(r));
  if (stale.length && socket.connected) socket.emit("unsubscribe", { rooms: stale });
  rooms = wanted;
  if (!wanted.length || !socket.connected) return;
  try {
    await socket.timeout(5000).emitWithAck("subscribe", { rooms: wanted });
  } catch (err) {
    scheduleCatchUp();
  }
}

function sequenced(event) {
  const last = streams.get(event.stream);
  streams.set(event.stream, { epoch: event.epoch, seq: event.seq });
  if (last && (last.epoch !== event.epoch || event.seq !== last.seq + 1)) scheduleCatchUp();
}

// Catch up soon: a burst of gaps makes one catch-up, at most a second after
// the first of them (core/debounce.js).
export const scheduleCatchUp = debouncer(() => catchUp());

async function catchUp() {
  if (current && current.catchUp) await current.catchUp();
}
