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
let current = null;  // {rooms(), catchUp(), on, also?: Map(owner -> [room])}
let socket = null;
let unconnected = null;  // timer: the HTTP read of a page shown before the socket connects
const CONNECT_WAIT_MS = 2000;
const MAX_ROOMS = 100;  // what one subscribe may name (api/live.py)

export function connect() {
  socket = io({ transports: ["websocket", "polling"] });
  socket.on("connect", () => {
    clearTimeout(unconnected);
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

// The view changed: follow its rooms, then catch it up.  While the socket is
// not connected (a page load, before its first connect) the connect handler
// does both, in that order; catching up here as well made every page load read
// each thing twice (issue 27).  A socket that stays away is not waited on for
// long: the page is read over HTTP anyway, and again on the connect.
export async function follow(view) {
  current = view;
  if (!socket.connected) {
    clearTimeout(unconnected);
    unconnected = setTimeout(catchUp, CONNECT_WAIT_MS);
    return;
  }
  await subscribe();
  await catchUp();
}

// Resolves once the server has joined the rooms.  Catching up only then closes
// a gap: an event relayed after the HTTP read but before the join would
// otherwise reach neither path.
async function subscribe() {
  const wanted = current ? [...new Set([...current.rooms(), ...[...(current.also || new Map()).values()].flat()])]
    .slice(0, MAX_ROOMS) : [];
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

// A component of the current view follows more rooms (the session page's
// sub-agent panel: the rooms of the tree's unfinished sessions).  They belong
// to the view: the next view starts without them.  Resolves once the server
// has joined them, with whether any room was new (what happened in it before
// is the caller's to read).
export async function followAlso(owner, more) {
  if (!current) return false;
  const also = current.also || (current.also = new Map());
  const fresh = more.filter((r) => !rooms.includes(r));
  if (more.length) also.set(owner, more);
  else also.delete(owner);
  await subscribe();
  return fresh.length > 0;
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
