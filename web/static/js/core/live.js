// Live events over Socket.IO, and catching up over HTTP.
//
// On every (re)connect the page subscribes to the rooms of the current view,
// then (once the server acknowledged) reads from its cursors over HTTP and
// merges live events by row id, so nothing is shown twice or missed.  Events
// carry {stream, seq, epoch}: a gap in seq or a new epoch (app.py restarted)
// triggers another catch-up, and so does a "gap" event (app.py says events were
// lost before reaching it: agents.py's relay dropped some, or reconnected).
// "step_delta" (a step's model output while it is generated) is live only:
// nothing to catch up on, so its seq is not watched.
//
// The badge says which: "live" once the page has caught up, "catching up…"
// from the moment it learns it fell behind until the catch-up that follows
// has read the record, "reconnecting…" while the socket is away.
//
// Events are small (domain/events.py): a field too big for one is left out and
// named in `omitted`, and an agent_state carries the config only when it
// changed.  merged() applies an event to what the page knows.
import { debouncer } from "./debounce.js";
import { $ } from "./dom.js";
import { liveHandlers } from "./registry.js";

const EPHEMERAL = ["step_delta"];
const streams = new Map();
let rooms = [];
let current = null;  // {rooms(), catchUp(), on, also?: Map(owner -> [room])}
const always = [];  // {rooms: [room], catchUp()}: what every view follows (followAlways)
let socket = null;
let unconnected = null;  // timer: the HTTP read of a page shown before the socket connects
let connected = false;
let behind = 0;    // counts the times the page learnt it missed events
let caughtUp = 0;  // the highest of those counts a finished catch-up started after
// A test may give a loaded machine longer (window.AGENTSVC_CONNECT_WAIT_MS, set
// before the page's scripts run), so that every page connects before reading.
const CONNECT_WAIT_MS = window.AGENTSVC_CONNECT_WAIT_MS || 2000;
const MAX_ROOMS = 100;  // what one subscribe may name (api/live.py)

export function connect() {
  socket = io({ transports: ["websocket", "polling"] });
  socket.on("connect", () => {
    clearTimeout(unconnected);
    connected = true;
    behind += 1;  // whatever happened while away: the catch-up below reads it
    showBadge();
    rooms = [];
    subscribe().then(catchUp);
  });
  const away = () => { connected = false; showBadge(); };
  socket.on("disconnect", away);
  socket.on("connect_error", away);
  socket.on("gap", () => fellBehind());
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

function showBadge() {
  const badge = $("#live");
  const state = !connected ? "off" : caughtUp < behind ? "behind" : "on";
  badge.className = "live " + state;
  badge.textContent = { off: "reconnecting…", behind: "catching up…", on: "live" }[state];
}

// The page missed events: say so, and catch up soon.
function fellBehind() {
  behind += 1;
  showBadge();
  scheduleCatchUp();
}

// What the page knows of a row (`known`, possibly null), updated by a live
// event's `data`: its fields replace the known ones, except those it left out
// for their size (`omitted`), which keep their known value.  Whether any was
// left out is the caller's to act on (read the row over HTTP).
export function merged(known, data) {
  const { omitted, ...fields } = data;
  const out = { ...(known || {}), ...fields };
  delete out.omitted;
  for (const key of Object.keys(omitted || {})) {
    if (known && key in known) out[key] = known[key];
    else delete out[key];
  }
  return out;
}

// The fields of `data` left out for their size, as an array (empty when none).
export function omittedOf(data) {
  return Object.keys((data && data.omitted) || {});
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
  await catchUp({ viewOnly: true });
}

// A part of the page outside the views (the nav's Needs-you count) follows
// ``rooms`` whatever the view, and is caught up with every catch-up of the
// socket (its connect, a gap), not on a change of view: its events keep it current.
export function followAlways(rooms, catchUpPart) {
  always.push({ rooms, catchUp: catchUpPart });
}

// Resolves once the server has joined the rooms.  Catching up only then closes
// a gap: an event relayed after the HTTP read but before the join would
// otherwise reach neither path.
async function subscribe() {
  const mine = always.flatMap((part) => part.rooms);
  const wanted = [...new Set([...mine, ...(current ? [...current.rooms(), ...[...(current.also || new Map()).values()]
    .flat()] : [])])].slice(0, MAX_ROOMS);
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
  if (last && (last.epoch !== event.epoch || event.seq !== last.seq + 1)) fellBehind();
}

// Catch up soon: a burst of gaps makes one catch-up, at most a second after
// the first of them (core/debounce.js).
export const scheduleCatchUp = debouncer(() => catchUp());

async function catchUp({ viewOnly = false } = {}) {
  const upTo = behind;  // what this read covers: it starts after the page learnt of those misses
  await Promise.all([current && current.catchUp ? current.catchUp() : null,
    ...(viewOnly ? [] : always.map((part) => part.catchUp()))]);
  caughtUp = Math.max(caughtUp, upTo);
  showBadge();
}
