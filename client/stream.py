"""Following ``GET /api/stream`` and resuming it after any disconnect.

The server's event ids are cursors (api/stream.py): after a dropped
connection, a restarted app.py, or an ``idle`` close, the client reconnects
with ``Last-Event-ID`` set to the cursor of the last event it handed out, and
the server sends everything after it from the record.  So what a follower
yields has no gap and no duplicate, across restarts too.

A ``step_delta`` (a step's model output while it is generated) is live only
and comes with no id: it never moves the cursor.  That is why the SSE parser is
our own and not httpx-sse's: by the SSE spec's rule a decoder keeps the last id
for every later event, and an event's own lack of one is what says it is not a
position to resume from.  Both clients (sync.py, aio.py) drive a
:class:`Follower`; only their I/O differs.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import httpx
from pydantic import ValidationError

from client import errors, models as m
from client._http import error_of

log = logging.getLogger("client.stream")

TIMEOUT = httpx.Timeout(60.0, connect=10.0)  # the server sends a comment every 15 s
FIRST_DELAY_S, MAX_DELAY_S = 0.2, 5.0
CLOSE = object()  # Follower.handle: end this connection


@dataclass
class Raw:
    """One SSE event as sent: its name, its JSON data, its id (None when it had none)."""
    event: str
    data: dict
    id: str | None


class Decoder:
    """SSE lines in, one :class:`Raw` out at each blank line that ends an event
    with data (comments and retry hints skipped)."""

    def __init__(self):
        self.event, self.data, self.id = "message", [], None

    def feed(self, line: str) -> Raw | None:
        if line == "":
            raw = Raw(self.event, json.loads("\n".join(self.data)), self.id) if self.data else None
            self.event, self.data, self.id = "message", [], None
            return raw
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self.event = value
        elif field == "data":
            self.data.append(value)
        elif field == "id":
            self.id = value
        return None


def parse(lines):
    """SSE lines -> :class:`Raw`."""
    decoder = Decoder()
    for line in lines:
        raw = decoder.feed(line)
        if raw is not None:
            yield raw


def typed(raw: Raw) -> m.Event:
    """The event as its model; one the client has no model for, or whose row
    does not fit (a field left out of a big event, a newer service), as :class:`~client.models.Event`."""
    fields = {"event": raw.event, "cursor": raw.id, "id": raw.data.get("id"), "stream": raw.data.get("stream"),
              "data": raw.data.get("data"), "payload": raw.data}
    model = m.EVENTS.get(raw.event)
    if model is not None:
        try:
            return model.model_validate(fields)
        except ValidationError as exc:
            log.debug("event %s does not fit %s: %s", raw.event, model.__name__, exc)
    return m.Event.model_validate(fields)


class Follower:
    """Where a stream is (its rooms and cursor) and what to do next: the
    request of the next connection, what each event means, the pause before
    reconnecting.  ``finished`` once a stream that does not ``follow`` has
    sent what was recorded (the server's ``ready``)."""

    timeout = TIMEOUT

    def __init__(self, rooms: list[str], session_id: str | None, agent_id: str | None,
                 conversation_id: str | None, since: str | None, tail: int | None, follow: bool, on_disconnect):
        self.rooms = list(rooms)
        for kind, some_id in (("session", session_id), ("agent", agent_id), ("conversation", conversation_id)):
            if some_id:
                self.rooms.append(f"{kind}:{some_id}")
        if not self.rooms:
            raise ValueError("give session_id, agent_id, conversation_id or rooms")
        self.cursor, self.tail, self.follow = since, tail, follow
        self.on_disconnect = on_disconnect or (lambda reason: log.info("stream: %s", reason))
        self.finished = False
        self._delay = FIRST_DELAY_S
        self._ok = False

    def request(self) -> dict:
        query = {"rooms": ",".join(self.rooms)}
        if self.tail is not None and not self.cursor:
            query["tail"] = self.tail
        headers = {"Accept": "text/event-stream", **({"Last-Event-ID": self.cursor} if self.cursor else {})}
        self._ok = False
        return {"params": query, "headers": headers}

    def connected(self) -> None:
        self._ok = True
        self._delay = FIRST_DELAY_S

    def handle(self, raw: Raw):
        """What one event of a connection means: an event to hand out (the cursor
        moved past it), None to skip it, or :data:`CLOSE` to end the connection
        (``idle``: reconnect; ``ready`` without ``follow``: done)."""
        if raw.event == "ready":
            if self.follow:
                return None
            self.finished = True
            return CLOSE
        if raw.event == "idle":
            self.on_disconnect("closed for idleness; reconnecting")
            return CLOSE
        if raw.id is not None:
            self.cursor = raw.id
        return typed(raw)

    def ended(self, exc: Exception | None = None) -> None:
        """The connection ended without :data:`CLOSE`: the server went away, or a line came cut."""
        what = f"connection lost ({exc.__class__.__name__})" if exc else "stream ended"
        self.on_disconnect(f"{what}; reconnecting")

    def refused(self, response: httpx.Response) -> None:
        """A 4xx (bad room, bad cursor) is final; a 5xx (503: too many streams, a
        restarting server) is retried when following."""
        if response.status_code < 500 or not self.follow:
            raise error_of(response)
        self.on_disconnect(f"HTTP {response.status_code}; retrying")

    def lost(self, exc: httpx.TransportError, url: str) -> None:
        if not self._ok and not self.follow:
            raise errors.Unreachable(url, f"cannot reach {url}: {exc.__class__.__name__}") from None
        verb = "connection lost" if self._ok else "cannot connect"
        self.on_disconnect(f"{verb} ({exc.__class__.__name__}); reconnecting")

    def delay(self) -> float:
        """The pause before the next connection: short after a good one, doubling while none works."""
        delay = self._delay
        self._delay = min(self._delay * 2, MAX_DELAY_S)
        return delay if not self._ok else FIRST_DELAY_S
