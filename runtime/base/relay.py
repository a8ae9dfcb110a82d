"""Relaying runtime events from agents.py to app.py, which fans them out to browsers.

A runtime observer turns each durable change into an event (see
domain/events.py) and puts it in a bounded buffer; a thread of its own (with
its own event loop, so a thousand busy agents do not slow its round trips)
sends the buffer in batches over a python-socketio ``AsyncClient`` to app.py's
token-protected ingest namespace, waiting for each batch's acknowledgement so
order is kept.

The relay never slows an agent down and never blocks on app.py, and when it
falls behind it sheds load by *coalescing*, not by dropping (issue 37: with
~190 KB configs in every event, whole batches of 200 missed their ack and were
dropped every 5 s while every page kept saying "live"):

- A session's newest ``agent_state`` replaces its unsent older one (it is the
  session as it is now; the older one is of no use), and so does a tool call's
  newest ``tool_call`` and an attempt's newest ``step_delta``.
  The newer one takes the older one's place in the queue, not the end: a
  session stepping faster than the queue drains would otherwise push its state
  back forever.  So a state can arrive before the step it already counts
  (clients take the newest iteration either way).  Steps, actions and messages
  are never replaced.  An ``agent_state`` is built
  (:func:`domain.events.session_summary`) only when it is sent, so a state
  replaced meanwhile costs nothing; it carries the config only when that
  changed (:class:`domain.events.ConfigChanges`).
- Every event is bounded in size (domain/events.py), and a batch holds at most
  ``BATCH`` events and ``BATCH_BYTES`` (well under the 1 MB message that app.py's
  Socket.IO server accepts: a bigger one closes the connection).
- Only when the buffer is full (``max_events`` or ``max_bytes``: app.py is
  down or far slower than the agents) is the oldest event dropped; a batch
  whose acknowledgement does not come is not sent again (app.py may have
  emitted it).  Either way the relay then sends a ``gap`` event naming the
  sessions concerned, and app.py tells every browser to catch up from the
  record; the relay sends one after each (re)connect as well, since whatever
  happened while it was away was not relayed.  Drops are logged at most once
  every ``LOG_EVERY_S``.

LanceDB is the record, and a dashboard catches up from it over HTTP.  The
client connects with retry and reconnects by itself.
"""
import asyncio
import itertools
import logging
import threading
import time
from collections import OrderedDict
from datetime import datetime, timezone

import socketio
from ulid import ULID

from domain.events import GAP, INGEST_NAMESPACE, ConfigChanges, bounded_sized, make_event, session_summary_sized

log = logging.getLogger("runtime.relay")

BATCH = 1000  # events in one batch at most (api/live.py MAX_BATCH)
# A batch's events' bytes at most.  app.py's Socket.IO server closes the
# connection on a message over 1,000,000 bytes (engine.io's max_http_buffer_size),
# so a bigger batch never gets its ack: the old relay's batches of 200 states
# with ~190 KB configs each were cut like that, every time.
BATCH_BYTES = 512 * 1024  # (a batch may pass it by one event: 64 KiB at most)
GAP_SESSIONS = 100  # sessions a gap event names at most (beyond: all of them, "sessions": null)
LOG_EVERY_S = 5.0
FAILED_PAUSE_S = 0.5  # after a batch that was not acknowledged
STATE_COST = 1024  # bytes a waiting agent_state counts for in the buffer's bound


class _Pending:
    """An event waiting to be sent: ``event`` is the finished event, or None for
    an ``agent_state`` still to be built from ``snapshot``."""

    __slots__ = ("event", "snapshot", "config", "size", "session_id")

    def __init__(self, event=None, snapshot=None, config=False, session_id=None, size=STATE_COST):
        self.event, self.snapshot, self.config, self.session_id = event, snapshot, config, session_id
        # A state waiting is a shallow copy (its values are the session's own): it
        # counts as a small event (STATE_COST) until built, when it is at most STATE_MAX_BYTES.
        self.size = size

    def built(self) -> dict:
        if self.event is None:
            data, self.size = session_summary_sized(self.snapshot, config=self.config)
            self.event = make_event("agent_state", data["session_id"], data)
            self.snapshot = None
        return self.event


class EventRelay:
    def __init__(self, url: str, token: str, *, max_events: int = 10_000, max_bytes: int = 32 << 20,
                 ack_timeout_s: float = 5.0):
        self.url = url
        self.token = token
        self.ack_timeout_s = ack_timeout_s
        self.max_events, self.max_bytes = max_events, max_bytes
        self.buffer: OrderedDict[tuple, _Pending] = OrderedDict()
        self.buffered_bytes = 0
        self.sent = 0
        self.dropped = 0
        self.coalesced = 0
        self._gap: dict | None = None  # {"reason", "dropped", "sessions": set | None}: to tell app.py next
        self._unlogged: dict[str, int] = {}  # reason -> events dropped since the last log line
        self._logged_at = float("-inf")
        self._configs = ConfigChanges()  # used on the agents' loop only
        self._order = itertools.count()
        self._lock = threading.Lock()  # the buffer, the gap and the counts of what was lost
        self._idle = True  # the sender waits for a wake-up (a publisher gives it one)
        self._thread: threading.Thread | None = None
        # The relay's thread and its loop make these (start): its client, wake-up and stop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._client = None

    # ---- observer hooks -------------------------------------------------

    async def snapshot_saved(self, snapshot: dict) -> None:
        self._publish_state(snapshot)

    async def step_persisted(self, snapshot: dict, step: dict) -> None:
        """The step, then the session as that step left it.  A stepping
        session's snapshot is saved at most once a second (runtime/session/agent.py),
        but watchers see its state move with every step, as before; what they
        see is what restart would rebuild from the durable step."""
        self.publish("agent_step", step["id"], dict(step, conversation_id=snapshot.get("conversation_id")))
        self._publish_state(snapshot)

    def _publish_state(self, snapshot: dict) -> None:
        """Queue the session's state, replacing its unsent older one.  Only a
        shallow copy is taken now: the event is built when it is sent (its
        nested values are the session's own, so it shows them as they are then)."""
        session_id = snapshot["session_id"]
        key = ("agent_state", session_id)
        older = self.buffer.get(key)
        config = self._configs.changed(snapshot) or (older is not None and older.config)  # a change it was to carry
        self._queue(key, _Pending(snapshot=dict(snapshot, updated_at=datetime.now(timezone.utc)), config=config,
                                  session_id=session_id))

    async def tool_call_updated(self, row: dict) -> None:
        """Every change of a tool call's status; ``id`` is the call's, so a client
        keeps the newest row per id (a call sends several events; an unsent
        older one is replaced)."""
        self.publish("tool_call", row["id"], row, key=("tool_call", row["id"]))

    async def action_finished(self, action: dict, ok: bool, error: str | None) -> None:
        row = {k: action.get(k) for k in ("id", "type", "agent_id", "session_id", "conversation_id", "created_at",
                                          "payload")}
        row.update(status="done" if ok else "failed", error=error)
        self.publish("action", action["id"], row)

    def step_delta(self, data: dict) -> None:
        """Live-only: a step's model output so far (runtime/base/live_output.py); ``id``
        is the session's.  It replaces an unsent older one of the same attempt
        (the text so far grows); an attempt's ``final`` one is the last of its key."""
        key = ("step_delta", data["session_id"], data.get("iteration"), data.get("function"), data.get("ask"),
               data.get("attempt"))
        self.publish("step_delta", data["session_id"], data, key=key)

    async def conversation_message(self, message: dict) -> None:
        self.publish("conversation_message", message["message_id"], message)

    def publish(self, event: str, row_id: str, data: dict, *, key: tuple | None = None) -> None:
        """Queue an event (built and bounded now); ``key``: it replaces an unsent
        event of the same key (without one it replaces nothing)."""
        plain, size = bounded_sized(data)
        pending = _Pending(event=make_event(event, row_id, plain), session_id=data.get("session_id"), size=size)
        self._queue(key or ("once", next(self._order)), pending)

    # ---- the buffer (shared by the agents' event loop and the relay's thread) -----

    def _queue(self, key: tuple, pending: _Pending) -> None:
        """Replace the unsent event of ``key`` in its place, or append.  When the
        buffer is full the oldest go, and the next batch starts with a gap
        event naming their sessions."""
        with self._lock:
            older = self.buffer.get(key)
            if older is not None:
                self.buffered_bytes -= older.size
                self.coalesced += 1
            self.buffer[key] = pending  # an existing key keeps its place
            self.buffered_bytes += pending.size
            while len(self.buffer) > self.max_events or (self.buffered_bytes > self.max_bytes
                                                         and len(self.buffer) > 1):
                _, oldest = self.buffer.popitem(last=False)
                self.buffered_bytes -= oldest.size
                self._lost("buffer_full", [oldest.session_id])
            wake, self._idle = self._idle, False
        if wake and self._loop is not None:  # one wake-up while the sender waits, not one per event
            self._loop.call_soon_threadsafe(self._wake.set)

    def _lost(self, reason: str, session_ids) -> None:
        """Remember events that will never reach app.py, for the next gap event
        and the log (the caller holds the lock)."""
        count = len(session_ids)
        self.dropped += count
        self._unlogged[reason] = self._unlogged.get(reason, 0) + count
        gap = self._gap_for(reason)
        gap["dropped"] += count
        if gap["sessions"] is not None:
            gap["sessions"].update(s for s in session_ids if s)
            if len(gap["sessions"]) > GAP_SESSIONS:
                gap["sessions"] = None  # too many to name: every session

    def _gap_for(self, reason: str) -> dict:
        if self._gap is None:
            self._gap = {"reason": reason, "dropped": 0, "sessions": set()}
        elif reason not in self._gap["reason"].split(","):
            self._gap["reason"] += "," + reason
        return self._gap

    def _has_work(self) -> bool:
        """Whether there is something to send; if not, the sender waits and a
        publisher will wake it."""
        with self._lock:
            if self.buffer or self._gap is not None:
                return True
            self._idle = True
            return False

    async def _connected(self) -> None:
        """(Re)connected: what happened while away was not relayed, so the first
        batch tells the browsers to catch up."""
        with self._lock:
            self._gap_for("connected")["sessions"] = None
        if self._wake is not None:
            self._wake.set()

    # ---- delivery, on a thread of its own ------------------------------------
    #
    # The sender has its own thread and event loop: on the agents' loop, with a
    # thousand agents stepping, every await of a batch's round trip waited for a
    # turn among them, and the relay sent a few hundred events a second while
    # the agents made thousands.  Publishing stays on the agents' loop (a lock,
    # a dict insert, one wake-up of an idle sender).

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="event-relay", daemon=True)
        self._thread.start()
        return self._thread

    async def close(self) -> None:
        """Stop the relay's thread (what it still holds is not sent)."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self._thread.join, 10)

    async def _main(self) -> None:
        self._wake, self._stop = asyncio.Event(), asyncio.Event()
        self._client = socketio.AsyncClient(reconnection=True, reconnection_delay=0.5, reconnection_delay_max=5)
        self._client.on("connect", self._connected, namespace=INGEST_NAMESPACE)
        self._loop = asyncio.get_running_loop()
        task = asyncio.create_task(self._run(), name="event-relay")
        await self._stop.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        try:
            await self._client.disconnect()
        except Exception as exc:  # already gone
            log.debug("relay disconnect: %s", exc)

    async def _run(self) -> None:
        await self._client.connect(self.url, namespaces=[INGEST_NAMESPACE], auth={"token": self.token},
                                   transports=["websocket"], retry=True, wait_timeout=5)
        log.info("relaying events to %s%s", self.url, INGEST_NAMESPACE)
        log_timer = None
        while True:
            self._log_drops()
            if not self._has_work():
                if self._unlogged and (log_timer is None or log_timer.when() <= self._loop.time()):
                    log_timer = self._loop.call_later(LOG_EVERY_S, self._wake.set)  # say it when the quiet ends
                await self._wake.wait()
                self._wake.clear()
                continue
            if not self._client.namespaces.get(INGEST_NAMESPACE):
                await asyncio.sleep(0.2)  # reconnecting by itself; keep the newest events meanwhile
                continue
            if not await self._send(self._next_batch()):
                await asyncio.sleep(FAILED_PAUSE_S)  # app.py is not answering: no tight loop of failures

    def _next_batch(self) -> list[tuple[_Pending | None, dict]]:
        """The gap event (if any) first, then the oldest events, up to BATCH
        events or BATCH_BYTES (and at most one event more: each is small).  A
        state is built here, off the agents' loop and outside the lock."""
        batch, size = [], 0
        with self._lock:
            gap, self._gap = self._gap, None
        if gap is not None:
            sessions = sorted(gap["sessions"]) if gap["sessions"] is not None else None
            batch.append((None, {"event": GAP, "id": str(ULID()), "stream": GAP,
                                 "data": {"reason": gap["reason"], "dropped": gap["dropped"], "sessions": sessions}}))
        while len(batch) < BATCH and size < BATCH_BYTES:
            with self._lock:
                if not self.buffer:
                    break
                _, pending = self.buffer.popitem(last=False)
                self.buffered_bytes -= pending.size
            try:
                event = pending.built()  # a state is built now, and then knows its size
            except Exception:  # a snapshot that cannot be encoded must not stop the relay
                log.exception("relay could not build the state of session %s", pending.session_id)
                with self._lock:
                    self._lost("unencodable", [pending.session_id])
                continue
            size += pending.size
            batch.append((pending, event))
        return batch

    async def _send(self, batch: list[tuple[_Pending | None, dict]]) -> bool:
        """Send one batch and wait for its acknowledgement; False when none came."""
        try:
            ack = await self._client.call("events", [event for _, event in batch], namespace=INGEST_NAMESPACE,
                                          timeout=self.ack_timeout_s)
            if not (isinstance(ack, dict) and ack.get("ok")):  # refused whole (a bug on one side or the other)
                raise RuntimeError(f"app.py refused the batch: {ack!r:.200}")
            self.sent += len(batch)
            return True
        except Exception as exc:  # disconnected or no ack in time: app.py may or may not have emitted them
            with self._lock:
                self._lost("not_acknowledged", [pending.session_id for pending, _ in batch if pending is not None])
                gap = next((event for pending, event in batch if pending is None), None)
                if gap is not None:  # the gap it was to tell: tell it with the next batch
                    again = self._gap_for(gap["data"]["reason"])
                    again["sessions"], again["dropped"] = None, again["dropped"] + gap["data"]["dropped"]
            log.debug("relay batch of %d events not acknowledged: %s", len(batch), exc or type(exc).__name__)
            return False

    def _log_drops(self, now: float | None = None) -> None:
        """One line per LOG_EVERY_S at most, when events were dropped."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self._unlogged or now - self._logged_at < LOG_EVERY_S:
                return
            unlogged, self._unlogged = self._unlogged, {}
            self._logged_at = now
        what = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in unlogged.items())
        log.warning("relay lost %d events (%s); browsers were told to catch up from the record",
                    sum(unlogged.values()), what)
