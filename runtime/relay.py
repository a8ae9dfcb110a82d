"""Relaying runtime events from agents.py to app.py, which fans them out to browsers.

A runtime observer turns each durable change into an event (see
domain/events.py) and puts it in a bounded buffer; one task sends the buffer
in batches over a python-socketio ``AsyncClient`` to app.py's token-protected
ingest namespace, waiting for each batch's acknowledgement so order is kept.

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
  ``BATCH`` events and about ``BATCH_BYTES``.
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
import time
from collections import OrderedDict
from datetime import datetime, timezone

import socketio
from ulid import ULID

from domain.events import GAP, INGEST_NAMESPACE, ConfigChanges, bounded, json_size, make_event, session_summary

log = logging.getLogger("runtime.relay")

BATCH = 200  # events in one batch at most
BATCH_BYTES = 1 << 20  # a batch is closed once it holds this much
GAP_SESSIONS = 100  # sessions a gap event names at most (beyond: all of them, "sessions": null)
LOG_EVERY_S = 5.0
FAILED_PAUSE_S = 0.5  # after a batch that was not acknowledged
STATE_COST = 1024  # bytes a waiting agent_state counts for in the buffer's bound


class _Pending:
    """An event waiting to be sent: ``event`` is the finished event, or None for
    an ``agent_state`` still to be built from ``snapshot``."""

    __slots__ = ("event", "snapshot", "config", "size", "session_id")

    def __init__(self, event=None, snapshot=None, config=False, session_id=None):
        self.event, self.snapshot, self.config, self.session_id = event, snapshot, config, session_id
        # A state waiting is a shallow copy (its values are the session's own): it
        # counts as a small event until built, when it is at most STATE_MAX_BYTES.
        self.size = STATE_COST if event is None else json_size(event["data"])

    def built(self) -> dict:
        if self.event is None:
            data = session_summary(self.snapshot, config=self.config)
            self.event = make_event("agent_state", data["session_id"], data)
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
        self._configs = ConfigChanges()
        self._order = itertools.count()
        self._wake = asyncio.Event()
        self._client = socketio.AsyncClient(reconnection=True, reconnection_delay=0.5, reconnection_delay_max=5)
        self._client.on("connect", self._connected, namespace=INGEST_NAMESPACE)
        self._task: asyncio.Task | None = None

    # ---- observer hooks -------------------------------------------------

    async def snapshot_saved(self, snapshot: dict) -> None:
        self._publish_state(snapshot)

    async def step_persisted(self, snapshot: dict, step: dict) -> None:
        """The step, then the session as that step left it.  A stepping
        session's snapshot is saved at most once a second (runtime/session.py),
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
        """Live-only: a step's model output so far (runtime/live_output.py); ``id``
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
        pending = _Pending(event=make_event(event, row_id, bounded(data)), session_id=data.get("session_id"))
        self._queue(key or ("once", next(self._order)), pending)

    # ---- the buffer -----------------------------------------------------

    def _queue(self, key: tuple, pending: _Pending) -> None:
        """Replace the unsent event of ``key`` in its place, or append.  When the
        buffer is full the oldest go, and the next batch starts with a gap
        event naming their sessions."""
        older = self.buffer.get(key)
        if older is not None:
            self.buffered_bytes -= older.size
            self.coalesced += 1
        self.buffer[key] = pending  # an existing key keeps its place
        self.buffered_bytes += pending.size
        while len(self.buffer) > self.max_events or (self.buffered_bytes > self.max_bytes and len(self.buffer) > 1):
            _, oldest = self.buffer.popitem(last=False)
            self.buffered_bytes -= oldest.size
            self._lost("buffer_full", [oldest.session_id])
        self._wake.set()

    def _lost(self, reason: str, session_ids) -> None:
        """Remember events that will never reach app.py, for the next gap event and the log."""
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

    async def _connected(self) -> None:
        """(Re)connected: what happened while away was not relayed, so the first
        batch tells the browsers to catch up."""
        self._gap_for("connected")["sessions"] = None
        self._wake.set()

    # ---- delivery -------------------------------------------------------

    def start(self) -> asyncio.Task:
        self._task = asyncio.create_task(self._run(), name="event-relay")
        return self._task

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            await self._client.disconnect()
        except Exception as exc:  # already gone
            log.debug("relay disconnect: %s", exc)

    async def _run(self) -> None:
        await self._client.connect(self.url, namespaces=[INGEST_NAMESPACE], auth={"token": self.token},
                                   transports=["websocket"], retry=True, wait_timeout=5)
        log.info("relaying events to %s%s", self.url, INGEST_NAMESPACE)
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.buffer or self._gap is not None:
                if not self._client.namespaces.get(INGEST_NAMESPACE):
                    await asyncio.sleep(0.2)  # reconnecting by itself; keep the newest events meanwhile
                    continue
                if not await self._send(self._next_batch()):
                    await asyncio.sleep(FAILED_PAUSE_S)  # app.py is not answering: no tight loop of failures
                self._log_drops()
            self._log_drops()
            if self._unlogged:  # say it once the quiet time is over, even if nothing else happens
                asyncio.get_running_loop().call_later(LOG_EVERY_S, self._wake.set)

    def _next_batch(self) -> list[tuple[_Pending | None, dict]]:
        """The gap event (if any) first, then the oldest events, up to BATCH
        events or about BATCH_BYTES."""
        batch, size = [], 0
        if self._gap is not None:
            gap, self._gap = self._gap, None
            sessions = sorted(gap["sessions"]) if gap["sessions"] is not None else None
            batch.append((None, {"event": GAP, "id": str(ULID()), "stream": GAP,
                                 "data": {"reason": gap["reason"], "dropped": gap["dropped"], "sessions": sessions}}))
        while self.buffer and len(batch) < BATCH and size < BATCH_BYTES:
            _, pending = self.buffer.popitem(last=False)
            self.buffered_bytes -= pending.size
            size += pending.size
            try:
                batch.append((pending, pending.built()))
            except Exception:  # a snapshot that cannot be encoded must not stop the relay
                log.exception("relay could not build the state of session %s", pending.session_id)
                self._lost("unencodable", [pending.session_id])
        return batch

    async def _send(self, batch: list[tuple[_Pending | None, dict]]) -> bool:
        """Send one batch and wait for its acknowledgement; False when none came."""
        try:
            await self._client.call("events", [event for _, event in batch], namespace=INGEST_NAMESPACE,
                                    timeout=self.ack_timeout_s)
            self.sent += len(batch)
            return True
        except Exception as exc:  # disconnected or no ack in time: app.py may or may not have emitted them
            lost = [pending.session_id for pending, _ in batch if pending is not None]
            self._lost("not_acknowledged", lost)
            gap = next((event for pending, event in batch if pending is None), None)
            if gap is not None:  # the gap it was to tell: tell it with the next batch
                again = self._gap_for(gap["data"]["reason"])
                again["sessions"], again["dropped"] = None, again["dropped"] + gap["data"]["dropped"]
            log.debug("relay batch of %d events not acknowledged: %s", len(batch), exc or type(exc).__name__)
            return False

    def _log_drops(self, now: float | None = None) -> None:
        """One line per LOG_EVERY_S at most, when events were dropped."""
        now = time.monotonic() if now is None else now
        if not self._unlogged or now - self._logged_at < LOG_EVERY_S:
            return
        what = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in self._unlogged.items())
        log.warning("relay lost %d events (%s); browsers were told to catch up from the record",
                    sum(self._unlogged.values()), what)
        self._unlogged.clear()
        self._logged_at = now
