"""Resumable live events over plain HTTP: ``GET /api/stream`` (Server-Sent Events).

    curl -N 'localhost:8765/api/stream?rooms=session:01J…,conversation:01J…'

The events are Socket.IO's (``agent_step``, ``agent_state``, ``action``,
``conversation_message``, shaped ``{id, stream, data}``, bounded in size as
domain/events.py says: an ``agent_state`` carries the config only when it
changed since the stream's last one, a field too big is named in
``data.omitted``), but every one is read from LanceDB, not from the live relay.  That is what makes the stream
resumable: each event's SSE ``id`` is a *cursor*, the position of the client
in every series it follows, and a client that reconnects with
``Last-Event-ID: <cursor>`` (or ``?after=<cursor>``) is served everything after
it from the record (across restarts of app.py and agents.py alike), then the
live ones, with no gap and no duplicate.

The one exception is ``step_delta`` (domain/events.py ``EPHEMERAL``): a
step's model output while it is generated, which is never stored.  The hub
hands it to the streams as it passes, and it goes out with no SSE ``id``, so it
never moves the client's cursor and is never replayed after a reconnect: a
client that was away has the step itself instead.  Per stream it is coalesced
to one every ``LIVE_GAP_S`` per session (the newest; an attempt's ``final``
delta is never replaced), at most ``LIVE_MAX_PENDING`` wait for a slow client
(the oldest are dropped), and a delta whose step was already sent is dropped.

The cursor is ``;``-separated ``kind:<id>=<position>`` items (no id can hold
``;`` or ``=``):

- ``step:<session_id>=<iteration>``: steps are delivered by iteration, which a
  session's single runner writes strictly in order.
- ``action:<session_id>=<action_id>``: finished actions in the order they were
  accepted (action ids are ULIDs); the cursor only moves past an action once it
  and all before it have finished, so a later one finishing first waits.
- ``state:<session_id>=<µs since epoch>``: the snapshot's ``updated_at``.  A
  snapshot is the latest state, not a history: a client that was away gets the
  current one once, not every intermediate one.
- ``msg:<conversation_id>=<message_id>``: messages in the conversation's
  ``(created_at, message_id)`` order, like ``GET …/messages?after=``.

Rooms: ``session:<id>`` (its steps, actions and snapshot), ``agent:<id>``
(the same for each of the agent's sessions, new ones included) and
``conversation:<id>`` (its messages).  After the first catch-up the server
sends one ``ready`` event (no id) so a client knows it has the past.

Liveness without polling LanceDB hard: the Socket.IO hub tells the open
streams when an event for one of their rooms passed through this process
(:meth:`StreamHub.published`), and they read from their cursor at once; otherwise
each stream reads every ``poll_s`` (events relayed to another app.py instance
arrive that way; a ``step_delta`` relayed there does not reach this one's
streams).  Each open stream holds a server thread (threading mode), so
their number is capped (503 beyond ``max_streams``), a comment is sent every
``keepalive_s`` (a server only learns that a client went away when it writes),
and a stream with nothing to send for ``idle_s`` is closed (the client
reconnects with its cursor).  Environment: ``AGENTSVC_MAX_STREAMS`` (32),
``AGENTSVC_STREAM_POLL_S`` (1), ``AGENTSVC_STREAM_IDLE_S`` (300),
``AGENTSVC_STREAM_KEEPALIVE_S`` (15).
"""
import logging
import os
import threading
import time
from datetime import datetime

from domain.events import EPHEMERAL, GAP, ConfigChanges, bounded, session_summary
from domain.statuses import ACTION_FINISHED
from store.filters import check_id

log = logging.getLogger("api.stream")

EXTENSION = "agentsvc_streams"  # app.extensions key of the app's StreamHub

KINDS = ("step", "action", "state", "msg")
MAX_ROOMS = 20
MAX_CURSOR_ITEMS = 500
PAGE = 200
LIVE_GAP_S = 0.1  # a stream sends one session's step_delta at most this often (~10 a second)
LIVE_MAX_PENDING = 64  # step_deltas waiting for a slow client; beyond this the oldest are dropped


# ---- the cursor -------------------------------------------------------------

def parse_cursor(text: str | None) -> dict[tuple[str, str], object]:
    """``kind:<id>=<position>;…`` -> {(kind, id): position}; ValueError if malformed."""
    cursor: dict[tuple[str, str], object] = {}
    if not text:
        return cursor
    items = [t for t in text.split(";") if t]
    if len(items) > MAX_CURSOR_ITEMS:
        raise ValueError(f"a cursor has at most {MAX_CURSOR_ITEMS} items")
    for item in items:
        kind, _, rest = item.partition(":")
        key, sep, value = rest.rpartition("=")
        if kind not in KINDS or not sep:
            raise ValueError(f"bad cursor item {item[:80]!r}")
        check_id(key, kind)
        if kind in ("step", "state"):
            position = int(value)
            if not -1 <= position < 2 ** 62:
                raise ValueError(f"bad cursor position in {item[:80]!r}")
        else:
            position = check_id(value, kind)
        cursor[(kind, key)] = position
    return cursor


def format_cursor(cursor: dict[tuple[str, str], object]) -> str:
    return ";".join(f"{kind}:{key}={value}" for (kind, key), value in cursor.items())


def micros(iso: str | None) -> int:
    if not iso:
        return -1
    when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return int(when.timestamp()) * 1_000_000 + when.microsecond


# ---- open streams: wake-ups and live-only events ----------------------------

class OpenStream:
    """One open stream as the hub sees it: the rooms it follows, whether a
    recorded event for them passed (then it reads the record), and the
    live-only events (``step_delta``) waiting to be sent to it.

    Live events are coalesced per session, because a client wants the newest
    text, not every one: a newer delta replaces the session's waiting one,
    unless that one is ``final`` (an attempt's end, which clients show as a line
    of its own), and a session's deltas go out at most every ``gap_s``.  At most
    ``max_pending`` wait; beyond that the oldest are dropped, so a slow client
    costs the hub this small buffer and never a wait."""

    def __init__(self, rooms: frozenset, gap_s: float, max_pending: int):
        self.rooms = rooms
        self.gap_s = gap_s
        self.max_pending = max_pending
        self.dropped = 0
        self._cond = threading.Condition()
        self._recorded = True  # read the record once at the start
        self._pending: list[tuple[str, str, dict]] = []  # (session, event name, payload), oldest first
        self._sent_at: dict[str, float] = {}  # session -> when its last live event went out

    def recorded(self) -> None:
        """A recorded event for one of the rooms passed: read the record soon."""
        with self._cond:
            self._recorded = True
            self._cond.notify()

    def live(self, name: str, payload: dict) -> None:
        session = payload["data"].get("session_id") or payload["id"]
        with self._cond:
            self._pending = [item for item in self._pending
                             if item[0] != session or item[2]["data"].get("final")]
            self._pending.append((session, name, payload))
            excess = len(self._pending) - self.max_pending
            if excess > 0:
                del self._pending[:excess]
                self.dropped += excess
            self._cond.notify()

    def take_recorded(self) -> bool:
        """Whether to read the record, clearing the flag (before reading, so an
        event from now on sets it again)."""
        with self._cond:
            recorded, self._recorded = self._recorded, False
            return recorded

    def take_live(self) -> list[tuple[str, dict]]:
        """The live events due now: each session's oldest waiting one, if the
        session's last went out ``gap_s`` ago or more."""
        now = time.monotonic()
        with self._cond:
            due, keep = [], []
            for session, name, payload in self._pending:
                if self._due_at(session, now) <= now:
                    self._sent_at[session] = now
                    due.append((name, payload))
                else:
                    keep.append((session, name, payload))
            self._pending = keep
            self._sent_at = {s: t for s, t in self._sent_at.items() if now - t < self.gap_s}
            return due

    def wait(self, timeout: float) -> None:
        """Sleep until a recorded event passes, a live event is due, or ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._recorded:
                now = time.monotonic()
                until = min([deadline] + [self._due_at(session, now) for session, _, _ in self._pending])
                if until <= now:
                    return
                self._cond.wait(until - now)

    def _due_at(self, session: str, now: float) -> float:
        """When the session's next live event may go out (``now`` if none went out lately)."""
        sent = self._sent_at.get(session)
        return now if sent is None else sent + self.gap_s


class StreamHub:
    """The open streams of this process: a cap on their number, and what the
    Socket.IO hub publishes, passed to the streams that follow its rooms."""

    def __init__(self, max_streams: int, poll_s: float, idle_s: float, keepalive_s: float,
                 live_gap_s: float = LIVE_GAP_S, live_max_pending: int = LIVE_MAX_PENDING):
        self.max_streams, self.poll_s, self.idle_s, self.keepalive_s = max_streams, poll_s, idle_s, keepalive_s
        self.live_gap_s, self.live_max_pending = live_gap_s, live_max_pending
        self._lock = threading.Lock()
        self._open: dict[int, OpenStream] = {}
        self._next = 0

    def open(self, rooms: frozenset) -> tuple[int, OpenStream] | None:
        with self._lock:
            if len(self._open) >= self.max_streams:
                return None
            self._next += 1
            self._open[self._next] = OpenStream(rooms, self.live_gap_s, self.live_max_pending)
            return self._next, self._open[self._next]

    def close(self, handle: int) -> None:
        with self._lock:
            self._open.pop(handle, None)

    @property
    def count(self) -> int:
        return len(self._open)

    def published(self, name: str, rooms, payload: dict) -> None:
        """The LiveHub emitted an event to ``rooms``: the streams following one
        of them read the record, or get it handed over if it is live-only.  A
        ``gap`` (events lost before this process) has every stream read."""
        rooms = set(rooms or ())
        with self._lock:
            following = [stream for stream in self._open.values() if name == GAP or stream.rooms & rooms]
        for stream in following:
            if name in EPHEMERAL:
                stream.live(name, payload)
            else:
                stream.recorded()


# ---- reading one stream from the record --------------------------------------

class Follower:
    """Reads, from the store, everything a client's rooms hold after its cursor."""

    def __init__(self, store, rooms: list[str], cursor: dict, tail: int | None = None):
        self.store = store
        self.rooms = rooms
        self.cursor = cursor
        self.tail = tail
        self._last_message: dict[str, dict] = {}  # conversation -> the cursor's message row
        self._configs = ConfigChanges()  # an agent_state carries the config when it changed

    def sessions(self) -> list[dict]:
        """The snapshots of the sessions the rooms cover (an agent's, newest last)."""
        out: dict[str, dict] = {}
        for room in self.rooms:
            kind, _, key = room.partition(":")
            if kind == "session":
                snapshot = self.store.states.get(key)
                if snapshot:
                    out[key] = snapshot
            elif kind == "agent":
                for snapshot in reversed(self.store.states.sessions_for_agent(key, limit=100)):
                    out[snapshot["session_id"]] = snapshot
        return list(out.values())

    def stepped_past(self, delta: dict) -> bool:
        """Whether a step_delta's step was sent already: the record has it, so
        the preview of its generation is over (a delta can wait out the gap
        while its step is read)."""
        sent = self.cursor.get(("step", delta.get("session_id")))
        iteration = delta.get("iteration")
        return isinstance(sent, int) and isinstance(iteration, int) and iteration <= sent

    def catch_up(self):
        """Yield ``(event, row_id, stream, data)`` for everything after the cursor,
        advancing the cursor as each is yielded."""
        for snapshot in self.sessions():
            yield from self._actions(snapshot["session_id"])
            yield from self._steps(snapshot)
            yield from self._state(snapshot)
        for room in self.rooms:
            kind, _, key = room.partition(":")
            if kind == "conversation":
                yield from self._messages(key)

    def _steps(self, snapshot: dict):
        session_id = snapshot["session_id"]
        key = ("step", session_id)
        if key not in self.cursor:
            start = -1
            if self.tail is not None:
                start = max(-1, (snapshot.get("iteration") or 0) - self.tail)
            self.cursor[key] = start
        while True:
            rows = self.store.steps.since_iteration(session_id, self.cursor[key], limit=PAGE)
            for step in rows:
                if step["iteration"] <= self.cursor[key]:
                    continue  # never send one twice, whatever the table holds
                self.cursor[key] = step["iteration"]
                data = bounded(dict(step, conversation_id=snapshot.get("conversation_id")))
                yield "agent_step", step["id"], f"agent_step:{session_id}", data
            if len(rows) < PAGE:
                return

    def _actions(self, session_id: str):
        key = ("action", session_id)
        while True:
            rows = self.store.actions.of_session(session_id, after=self.cursor.get(key), limit=PAGE)
            for action in rows:
                if action["status"] not in ACTION_FINISHED:
                    return  # later ones wait until this one has finished: the cursor has no holes
                self.cursor[key] = action["id"]
                row = {k: action.get(k) for k in ("id", "type", "agent_id", "session_id", "conversation_id",
                                                  "created_at", "status", "error", "processed_at")}
                yield "action", action["id"], f"action:{session_id}", bounded(row)
            if len(rows) < PAGE:
                return

    def _state(self, snapshot: dict):
        key = ("state", snapshot["session_id"])
        stamp = micros(snapshot.get("updated_at"))
        if stamp > self.cursor.get(key, -1):
            self.cursor[key] = stamp
            row = session_summary(snapshot, config=self._configs.changed(snapshot))
            yield "agent_state", snapshot["session_id"], f"agent_state:{snapshot['session_id']}", row

    def _messages(self, conversation_id: str):
        key = ("msg", conversation_id)
        conversations = self.store.conversations
        while True:
            after = None
            if key in self.cursor:
                after = self._last_message.get(conversation_id)
                if after is None or after["message_id"] != self.cursor[key]:
                    after = conversations.get_message(conversation_id, self.cursor[key])
                    if after is None:
                        return  # a cursor naming no message of this conversation: nothing to follow from
            rows = conversations.transcript(conversation_id, after=after, limit=PAGE)
            for message in rows:
                self.cursor[key] = message["message_id"]
                self._last_message[conversation_id] = message
                yield ("conversation_message", message["message_id"], f"conversation_message:{conversation_id}",
                       bounded(message))
            if len(rows) < PAGE:
                return


def install(app, live_hub=None, *, max_streams: int | None = None, poll_s: float | None = None,
            idle_s: float | None = None, keepalive_s: float | None = None) -> StreamHub:
    """Give the app its StreamHub (the route is api/routes/stream.py); ``live_hub``
    (api.live.LiveHub) passes its events to the streams."""
    env = os.environ.get
    hub = StreamHub(max_streams=max_streams or int(env("AGENTSVC_MAX_STREAMS") or 32),
                    poll_s=poll_s or float(env("AGENTSVC_STREAM_POLL_S") or 1.0),
                    idle_s=idle_s or float(env("AGENTSVC_STREAM_IDLE_S") or 300.0),
                    keepalive_s=keepalive_s or float(env("AGENTSVC_STREAM_KEEPALIVE_S") or 15.0))
    app.extensions[EXTENSION] = hub
    if live_hub is not None:
        live_hub.listeners.append(hub.published)
    return hub
