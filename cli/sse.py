"""``agentsvc tail``'s events: the Python client's stream (client/stream.py,
which resumes after any disconnect from the last cursor), as the command
renders them: the event's name, its payload ``{id, stream, data}`` as sent,
and its cursor (None for a live-only ``step_delta``)."""
from dataclasses import dataclass

from cli.client import Client, failure
from client import errors
from client.stream import parse  # noqa: F401 - the SSE parser, for tests that read the stream raw


@dataclass
class Event:
    event: str
    data: dict
    id: str | None


def follow(client: Client, rooms: list[str], *, follow: bool = True, tail: int | None = None,
           cursor: str | None = None, on_disconnect=lambda reason: None):
    """Yield the events of ``rooms``: the recorded ones, then (``follow``) the live
    ones forever, reconnecting after any failure.  Without ``follow`` it stops at
    the server's ``ready`` (everything recorded so far was sent)."""
    try:
        for event in client.http.stream(rooms=rooms, since=cursor, tail=tail, follow=follow,
                                        on_disconnect=on_disconnect):
            yield Event(event.event, event.payload, event.cursor)
    except errors.ClientError as exc:
        raise failure(exc) from None
