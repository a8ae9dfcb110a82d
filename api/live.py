"""Live events over Socket.IO: what browsers subscribe to, and the door agents.py
delivers its events through.

Two namespaces:

- ``/`` for browsers.  A client emits ``subscribe`` with ``{"rooms": [...]}``
  ("all", "agent:<id>", "session:<id>", "conversation:<id>", "needs-you") and receives
  ``agent_state``, ``agent_step``, ``conversation_message`` and ``action``
  events as ``{id, stream, seq, epoch, data}``.  "needs-you" receives only
  ``tool_call`` events (any session's): what the dashboard's Needs-you count
  follows on every page, without the steps of "all".  ``seq`` counts 1, 2, 3… per
  stream within one ``epoch`` (this process's boot id): a client that sees a gap
  or a new epoch catches up over HTTP and de-duplicates by ``id``.  It also
  receives ``step_delta`` (domain/events.py ``EPHEMERAL``): a step's model
  output while it is generated, live only, never stored, so there is nothing to
  catch up on and a gap in its ``seq`` means nothing.  Every client, whatever
  its rooms, receives ``gap`` (``{id, epoch, data: {reason, dropped,
  sessions}}``, no ``seq``) when events were lost before reaching this process
  (agents.py's relay dropped some, or has just (re)connected): it catches up
  over HTTP.  Events are small (domain/events.py): a field left out for its
  size is named in ``data.omitted`` and read over HTTP.
- ``/ingest`` for agents.py, accepting only a client whose ``auth.token`` is the
  shared events token (domain/events.py); it takes batches of events (a
  ``gap`` among them) and acknowledges each batch after emitting it.

Events app.py produces itself (user messages) go through the same
:meth:`LiveHub.publish`.
"""
import hmac
import logging
import threading

from flask import request
from flask_socketio import SocketIO, join_room, leave_room
from ulid import ULID

from api import auth
from api.guard import SitePolicy
from domain.tokens import TokenRing
from domain.events import EVENTS, GAP, INGEST_NAMESPACE, make_event, rooms_for
from store.filters import InvalidId, check_id

log = logging.getLogger("api.live")

ROOM_PREFIXES = ("agent", "session", "conversation")
NEEDS_YOU = "needs-you"  # every tool_call event, and nothing else
WHOLE_ROOMS = ("all", NEEDS_YOU)
MAX_BATCH = 1000


def check_room(room: object) -> str:
    if room in WHOLE_ROOMS:
        return room
    prefix, sep, rest = str(room).partition(":")
    if not sep or prefix not in ROOM_PREFIXES:
        raise InvalidId(f"room must be one of {WHOLE_ROOMS} or one of {ROOM_PREFIXES} followed by ':<id>'")
    return f"{prefix}:{check_id(rest, prefix + '_id')}"


def rooms_of(name: str, data: dict) -> list[str]:
    """domain/events.py's rooms, and "needs-you" for a tool call: a question or
    approval opening or closing anywhere changes what waits for a person."""
    rooms = rooms_for(name, data)
    return rooms + [NEEDS_YOU] if name == "tool_call" else rooms


class LiveHub:
    """Numbers the events of each stream and emits them to their rooms."""

    def __init__(self, socketio: SocketIO):
        self.socketio = socketio
        self.epoch = str(ULID())
        self._seq: dict[str, int] = {}
        self._lock = threading.Lock()
        self.published = 0
        self.gaps = 0
        # Called with (event name, rooms, payload) after each emit: api/stream.py
        # wakes its streams on recorded events and hands them the live-only ones.
        self.listeners = []

    def publish(self, event: dict) -> dict:
        if event["event"] == GAP:
            return self.publish_gap(event)
        data = event["data"]
        # Numbering and emitting under one lock keeps each stream's seq in emit order.
        with self._lock:
            seq = self._seq[event["stream"]] = self._seq.get(event["stream"], 0) + 1
            payload = {"id": event["id"], "stream": event["stream"], "seq": seq, "epoch": self.epoch, "data": data}
            rooms = rooms_of(event["event"], data)
            self.socketio.emit(event["event"], payload, to=rooms, namespace="/")
            self.published += 1
        for listener in self.listeners:
            listener(event["event"], rooms, payload)
        return payload

    def publish_gap(self, event: dict) -> dict:
        """Events were lost on their way here: every client (any room) catches up."""
        payload = {"id": event["id"], "epoch": self.epoch, "data": event["data"]}
        self.socketio.emit(GAP, payload, namespace="/")
        self.gaps += 1
        log.debug("told clients to catch up: %s", {k: v for k, v in event["data"].items() if k != "sessions"})
        for listener in self.listeners:
            listener(GAP, None, payload)
        return payload

    def publish_row(self, name: str, row_id: str, data: dict) -> dict:
        return self.publish(make_event(name, row_id, data))


def valid_event(event: object) -> bool:
    return (isinstance(event, dict) and (event.get("event") in EVENTS or event.get("event") == GAP)
            and isinstance(event.get("id"), str) and isinstance(event.get("stream"), str)
            and isinstance(event.get("data"), dict))


def install(app, token: str | None, message_queue: str | None = None,
            site: SitePolicy | None = None) -> tuple[SocketIO, LiveHub]:
    """Attach Flask-SocketIO (threading mode: real WebSockets via simple-websocket).
    With ``message_queue`` (redis://…) every instance's emits reach the clients
    of all instances sharing the queue.  ``site`` decides which pages' origins
    may connect (api/guard.py; default: the service's own only)."""
    socketio = SocketIO(app, async_mode="threading", message_queue=message_queue,
                        cors_allowed_origins=site.socketio_origin if site else None)
    hub = LiveHub(socketio)
    app.extensions["agentsvc_live"] = hub
    _browser_handlers(socketio, hub, app.extensions[auth.EXTENSION])
    _ingest_handlers(socketio, hub, token)
    return socketio, hub


def _browser_handlers(socketio: SocketIO, hub: LiveHub, ring: TokenRing) -> None:
    @socketio.on("connect")
    def connect(offered=None):
        # With tokens, a browser connects with its login cookie, a client with
        # auth.token or a bearer header (api/auth.py); anyone else is refused.
        if ring.enabled and auth.principal_of_socket(ring, offered) is None:
            log.warning("live connection refused from %s: no valid token", request.remote_addr)
            raise ConnectionRefusedError("unauthorized")
        socketio.emit("hello", {"epoch": hub.epoch}, to=request.sid)

    @socketio.on("subscribe")
    def subscribe(message):
        return _rooms(message, join_room, hub)

    @socketio.on("unsubscribe")
    def unsubscribe(message):
        return _rooms(message, leave_room, hub)


def _rooms(message, action, hub: LiveHub) -> dict:
    rooms = message.get("rooms") if isinstance(message, dict) else None
    if not isinstance(rooms, list) or not rooms or len(rooms) > 100:
        return {"error": {"code": "invalid_request", "message": "rooms must be a list of 1 to 100 room names"}}
    try:
        checked = [check_room(r) for r in rooms]
    except InvalidId as exc:
        return {"error": {"code": "invalid_room", "message": str(exc)}}
    for room in checked:
        action(room)
    return {"ok": True, "rooms": checked, "epoch": hub.epoch}


def _ingest_handlers(socketio: SocketIO, hub: LiveHub, token: str | None) -> None:
    @socketio.on("connect", namespace=INGEST_NAMESPACE)
    def connect(auth=None):
        offered = auth.get("token") if isinstance(auth, dict) else None
        if not token or not isinstance(offered, str) or not hmac.compare_digest(offered.encode(), token.encode()):
            log.warning("ingest connection refused from %s: bad or missing token", request.remote_addr)
            raise ConnectionRefusedError("unauthorized")

    @socketio.on("events", namespace=INGEST_NAMESPACE)
    def events(batch):
        if not isinstance(batch, list) or len(batch) > MAX_BATCH:
            return {"ok": False, "error": "a batch is a list of at most 1000 events"}
        accepted = 0
        for event in batch:
            if valid_event(event):
                hub.publish(event)
                accepted += 1
        return {"ok": True, "accepted": accepted}
