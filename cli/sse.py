"""Following ``GET /api/stream`` and resuming it after any disconnect.

The server's event ids are cursors (api/stream.py): after a dropped connection,
a restarted app.py, or an ``idle`` close, the reader reconnects with
``Last-Event-ID`` set to the id of the last event it handed out, so what it
yields has no gap and no duplicate.
"""
import json
import logging
import time
from dataclasses import dataclass

import requests

from cli.client import ApiFailure, Client

log = logging.getLogger("cli.sse")


@dataclass
class Event:
    event: str
    data: dict
    id: str | None


def parse(lines):
    """SSE lines -> :class:`Event` (ids as sent; comments and retry hints skipped)."""
    event, data, event_id = "message", [], None
    for line in lines:
        if line == "":
            if data:
                yield Event(event, json.loads("\n".join(data)), event_id)
            event, data, event_id = "message", [], None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            event_id = value


def follow(client: Client, rooms: list[str], *, follow: bool = True, tail: int | None = None,
           cursor: str | None = None, on_disconnect=lambda reason: None):
    """Yield the events of ``rooms``: the recorded ones, then (``follow``) the live
    ones forever, reconnecting after any failure.  Without ``follow`` it stops at
    the server's ``ready`` (everything recorded so far was sent)."""
    delay = 0.2
    while True:
        try:
            response = client.open_stream(rooms, cursor, tail)
        except requests.RequestException as exc:
            if not follow:
                raise ApiFailure(5, "unreachable", f"cannot reach {client.url}: {exc.__class__.__name__}") from None
            on_disconnect(f"cannot connect ({exc.__class__.__name__}); retrying")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        if response.status_code != 200:
            _fail(response, follow)
            on_disconnect(f"HTTP {response.status_code}; retrying")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        delay = 0.2
        try:
            for event in parse(line.decode("utf-8") for line in response.iter_lines()):
                if event.event == "ready":
                    if not follow:
                        return
                    continue
                if event.event == "idle":
                    break  # closed for idleness: reconnect from the cursor
                if event.id is not None:
                    cursor = event.id
                yield event
            else:
                on_disconnect("stream ended; reconnecting")
        except (requests.RequestException, ValueError) as exc:
            on_disconnect(f"connection lost ({exc.__class__.__name__}); reconnecting")
        finally:
            response.close()


def _fail(response, follow: bool) -> None:
    """A 4xx (bad room, bad cursor) is final; a 5xx (503: too many streams, a
    restarting server) is retried when following."""
    if response.status_code < 500 or not follow:
        try:
            error = response.json()["error"]
        except (ValueError, KeyError, TypeError):
            error = {"code": "http_error", "message": f"HTTP {response.status_code}"}
        exit_code = 3 if response.status_code == 404 else 4 if response.status_code < 500 else 5
        raise ApiFailure(exit_code, error["code"], error["message"], response.status_code)
