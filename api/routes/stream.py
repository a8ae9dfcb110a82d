"""``GET /api/stream``: live events as Server-Sent Events, resumable from a
cursor.  What the events are, how the cursor works and how the streams are
capped is api/stream.py's to say; this is the route.

The route is left out of the OpenAPI document: it answers an open-ended
``text/event-stream``, which a document-driven client cannot check.
"""
import json
import logging
import time

from flask import Blueprint, Response, current_app, request

from api.context import ctx
from api.errors import ApiError
from api.live import WHOLE_ROOMS, check_room
from api.stream import EXTENSION, MAX_ROOMS, Follower, OpenStream, StreamHub, format_cursor, parse_cursor
from store.filters import InvalidId

log = logging.getLogger("api.stream")

bp = Blueprint("stream", __name__, url_prefix="/api")


def sse(event: str, data: dict, event_id: str | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n"


def parse_rooms(text: str | None) -> list[str]:
    names = [r.strip() for r in (text or "").split(",") if r.strip()]
    if not names or len(names) > MAX_ROOMS:
        raise ApiError(400, "invalid_request", f"rooms must name 1 to {MAX_ROOMS} rooms, comma-separated")
    try:
        rooms = list(dict.fromkeys(check_room(r) for r in names))
    except InvalidId as exc:
        raise ApiError(400, "invalid_room", str(exc)) from None
    if set(rooms) & set(WHOLE_ROOMS):
        raise ApiError(400, "invalid_room", f"the stream follows session:, agent: or conversation: rooms, not "
                                            f"{' or '.join(repr(r) for r in WHOLE_ROOMS)}")
    return rooms


def parse_tail(text: str | None) -> int | None:
    if text in (None, ""):
        return None
    try:
        tail = int(text)
    except ValueError:
        tail = -1
    if not 0 <= tail <= 100_000:
        raise ApiError(400, "invalid_request", "tail must be an integer from 0 to 100000")
    return tail


@bp.get("/stream")
def stream():
    rooms = parse_rooms(request.args.get("rooms"))
    try:
        cursor = parse_cursor(request.headers.get("Last-Event-ID") or request.args.get("after"))
    except (ValueError, InvalidId) as exc:
        raise ApiError(400, "invalid_cursor", str(exc)) from None
    tail = parse_tail(request.args.get("tail"))
    hub: StreamHub = current_app.extensions[EXTENSION]
    opened = hub.open(frozenset(rooms))
    if opened is None:
        raise ApiError(503, "too_many_streams", f"{hub.max_streams} streams are open; retry later")
    follower = Follower(ctx().store, rooms, cursor, tail)
    log.info("stream %d opened rooms=%s cursor_items=%d", opened[0], ",".join(rooms), len(cursor))
    return Response(_events(hub, opened, follower), mimetype="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _recorded(follower: Follower):
    """What the record holds after the cursor, each event with the cursor just past it."""
    for event, row_id, stream_name, data in follower.catch_up():
        yield sse(event, {"id": row_id, "stream": stream_name, "data": data}, format_cursor(follower.cursor))


def _events(hub: StreamHub, opened: tuple[int, OpenStream], follower: Follower):
    """The stream: the record after the cursor, then ``ready``, then whatever
    the rooms record (read at once when the hub says so, else every ``poll_s``)
    and their live-only events, which carry no id: they never move a client's
    cursor, so they are never sent again after a reconnect."""
    handle, stream = opened
    try:
        yield "retry: 1000\n\n"
        ready = False
        last_read = last_sent = last_beat = time.monotonic()
        while True:
            if stream.take_recorded() or time.monotonic() - last_read >= hub.poll_s:
                last_read = time.monotonic()
                for text in _recorded(follower):
                    yield text
                    last_sent = last_beat = time.monotonic()
                if not ready:
                    ready = True
                    yield sse("ready", {"cursor": format_cursor(follower.cursor), "rooms": follower.rooms})
            for event, payload in stream.take_live():
                if not follower.stepped_past(payload["data"]):
                    yield sse(event, {"id": payload["id"], "stream": payload["stream"], "data": payload["data"]})
                    last_sent = last_beat = time.monotonic()
            stream.wait(max(0.0, last_read + hub.poll_s - time.monotonic()))
            now = time.monotonic()
            if now - last_sent > hub.idle_s:
                yield sse("idle", {"cursor": format_cursor(follower.cursor)})
                return
            if now - last_beat > hub.keepalive_s:
                last_beat = now
                yield ": keepalive\n\n"
    finally:
        hub.close(handle)
        log.info("stream %d closed (%d live events dropped for a slow client)", handle, stream.dropped)
