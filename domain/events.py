"""The live-event protocol shared by agents.py (which produces events) and
app.py (which fans them out to browsers), and the token between the two.

An event is ``{"event", "id", "stream", "data"}``: ``id`` is the id of the row
it describes (a step id, a message id, an action id, or the session id for a
snapshot), ``stream`` names the ordered series it belongs to.  app.py adds
``seq`` (1, 2, 3… per stream) and ``epoch`` (its boot id) before emitting, so a
client sees gaps and restarts and knows when to catch up over HTTP.

Token: agents.py delivers events to a Socket.IO namespace of app.py that only
accepts clients presenting the shared token.  serve.py generates one per run and
passes it to both children in ``AGENTSVC_EVENTS_TOKEN``.  When that is unset
(each process started by hand), both read ``<data dir>/events.token``, and the
first to start creates it (random, mode 0600), so two processes on one data
directory agree without configuration.
"""
import os
import secrets
import time

INGEST_NAMESPACE = "/ingest"
TOKEN_ENV = "AGENTSVC_EVENTS_TOKEN"
TOKEN_FILE = "events.token"
EVENTS = ("agent_state", "agent_step", "conversation_message", "action", "tool_call", "step_delta")
# ``step_delta`` is live-only: a step's model output while it is generated
# (runtime/step_stream.py), never stored; the step row that follows is the record.
EPHEMERAL = ("step_delta",)


def rooms_for(event: str, data: dict) -> list[str]:
    """The rooms an event goes to: everything goes to "all", and to the rooms of
    the agent, session and conversation it concerns."""
    rooms = ["all"]
    for key, prefix in (("agent_id", "agent"), ("session_id", "session"), ("conversation_id", "conversation")):
        if data.get(key):
            rooms.append(f"{prefix}:{data[key]}")
    return rooms


def stream_of(event: str, data: dict) -> str:
    """Session events (tool calls included) are ordered per session, messages per conversation."""
    if event == "conversation_message":
        return f"{event}:{data.get('conversation_id')}"
    return f"{event}:{data.get('session_id') or data.get('agent_id')}"


def make_event(event: str, row_id: str, data: dict) -> dict:
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}")
    return {"event": event, "id": row_id, "stream": stream_of(event, data), "data": data}


def events_token(data_dir: str) -> str:
    """The shared secret: the environment's, else the data directory's token file
    (created on first use)."""
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, TOKEN_FILE)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_token(path)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(32))
    return _read_token(path)


def _read_token(path: str) -> str:
    # The creator may be between open and write: wait briefly for the text.
    for _ in range(50):
        with open(path) as f:
            token = f.read().strip()
        if token:
            return token
        time.sleep(0.02)
    raise RuntimeError(f"{path} is empty; delete it or set {TOKEN_ENV}")
