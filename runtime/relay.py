"""Relaying runtime events from agents.py to app.py, which fans them out to browsers.

A runtime observer turns each durable change into an event (see
domain/events.py) and puts it in a bounded buffer; one task sends the buffer
in batches over a python-socketio ``AsyncClient`` to app.py's token-protected
ingest namespace, waiting for each batch's acknowledgement so order is kept.

The relay never slows an agent down and never blocks on app.py: while app.py
is unreachable the newest ``max_buffer`` events wait and older ones are
dropped, and a batch whose delivery fails is dropped.  That is by design:
LanceDB is the record, and a dashboard catches up from it over HTTP.  The
client connects with retry and reconnects by itself.
"""
import asyncio
import json
import logging
from collections import deque
from datetime import datetime, timezone

import socketio

from domain.events import INGEST_NAMESPACE, make_event
from domain.redact import redact_json_text

log = logging.getLogger("runtime.relay")

BATCH = 200


def jsonable(row: dict) -> dict:
    """Rows as the browser sees them over HTTP: datetimes as ISO-8601 UTC with Z,
    and secret-named keys redacted as in the record (domain/redact.py)."""
    def convert(value):
        if isinstance(value, datetime):
            value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
            return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
        return str(value)
    return json.loads(redact_json_text(json.dumps(row, default=convert)))


class EventRelay:
    def __init__(self, url: str, token: str, *, max_buffer: int = 1000, ack_timeout_s: float = 5.0):
        self.url = url
        self.token = token
        self.ack_timeout_s = ack_timeout_s
        self.buffer: deque[dict] = deque(maxlen=max_buffer)
        self.sent = 0
        self.dropped = 0
        self._wake = asyncio.Event()
        self._client = socketio.AsyncClient(reconnection=True, reconnection_delay=0.5, reconnection_delay_max=5)
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
        row = dict(snapshot, updated_at=datetime.now(timezone.utc))
        row.pop("pending_guidance", None)  # internal bookkeeping, can be large
        self.publish("agent_state", snapshot["session_id"], row)

    async def tool_call_updated(self, row: dict) -> None:
        """Every change of a tool call's status; ``id`` is the call's, so a client
        keeps the newest row per id (a call sends several events)."""
        self.publish("tool_call", row["id"], row)

    async def action_finished(self, action: dict, ok: bool, error: str | None) -> None:
        row = {k: action.get(k) for k in ("id", "type", "agent_id", "session_id", "conversation_id", "created_at",
                                          "payload")}
        row.update(status="done" if ok else "failed", error=error)
        self.publish("action", action["id"], row)

    def step_delta(self, data: dict) -> None:
        """Live-only: a step's model output so far (runtime/live_output.py); ``id`` is the session's."""
        self.publish("step_delta", data["session_id"], data)

    async def conversation_message(self, message: dict) -> None:
        self.publish("conversation_message", message["message_id"], message)

    def publish(self, event: str, row_id: str, data: dict) -> None:
        if len(self.buffer) == self.buffer.maxlen:
            self.dropped += 1
        self.buffer.append(make_event(event, row_id, jsonable(data)))
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
            while self.buffer:
                if not self._client.namespaces.get(INGEST_NAMESPACE):
                    await asyncio.sleep(0.2)  # reconnecting by itself; keep the newest events meanwhile
                    continue
                batch = [self.buffer.popleft() for _ in range(min(BATCH, len(self.buffer)))]
                await self._send(batch)

    async def _send(self, batch: list[dict]) -> None:
        try:
            await self._client.call("events", batch, namespace=INGEST_NAMESPACE, timeout=self.ack_timeout_s)
            self.sent += len(batch)
        except Exception as exc:  # disconnected or no ack in time: these events are lost
            self.dropped += len(batch)
            log.warning("relay dropped %d events: %s", len(batch), exc or type(exc).__name__)
