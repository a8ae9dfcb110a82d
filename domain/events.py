"""The live-event protocol shared by agents.py (which produces events) and
app.py (which fans them out to browsers), and the token between the two.

An event is ``{"event", "id", "stream", "data"}``: ``id`` is the id of the row
it describes (a step id, a message id, an action id, or the session id for a
snapshot), ``stream`` names the ordered series it belongs to.  app.py adds
``seq`` (1, 2, 3… per stream) and ``epoch`` (its boot id) before emitting, so a
client sees gaps and restarts and knows when to catch up over HTTP.

Live events are a faster view of the record, never the record, so they stay
small (issue 37: with ~190 KB configs in every ``agent_state`` the relay fell
minutes behind):

- ``agent_state`` carries what changes (status, iteration, usage, last_error,
  the state and result when small...) and never the session's
  ``pending_guidance``/``used_guidance``; it carries ``config`` only when the
  config changed since the last ``agent_state`` of that session its sender sent
  (:class:`ConfigChanges`), so a client keeps the config it read over HTTP
  until then.  :func:`session_summary` builds it; a row of a session list
  (``GET /api/agents``) is the same summary without config and state.
- A result bigger than :data:`RESULT_MAX_BYTES` is summarised there: its
  text clipped to :data:`RESULT_TEXT_CHARS` (what a list shows), its size in
  ``summarised`` (``{"result": bytes}``).
- Every event's ``data`` is at most :data:`EVENT_MAX_BYTES` as JSON
  (:data:`STATE_MAX_BYTES` for ``agent_state``): :func:`bounded` leaves out the
  largest fields until it fits and names them in ``omitted``
  (``{field: bytes}``).  A client that needs one reads the row over HTTP.
- ``gap`` (not a row event) says events were lost on the way (the relay's
  buffer overflowed, a batch was not acknowledged, or the relay has just
  (re)connected): app.py sends it to every browser, which then catches up from
  the record.  ``data``: ``{reason, dropped, sessions}``.

Token: agents.py delivers events to a Socket.IO namespace of app.py that only
accepts clients presenting the shared token.  serve.py generates one per run and
passes it to both children in ``AGENTSVC_EVENTS_TOKEN``.  When that is unset
(each process started by hand), both read ``<data dir>/events.token``, and the
first to start creates it (random, mode 0600), so two processes on one data
directory agree without configuration.
"""
import json
import os
import secrets
import time
from datetime import datetime, timezone

import orjson

from domain.redact import redact_json_text
from domain.statuses import SESSION_FINISHED as FINISHED_STATUSES

INGEST_NAMESPACE = "/ingest"
TOKEN_ENV = "AGENTSVC_EVENTS_TOKEN"
TOKEN_FILE = "events.token"
EVENTS = ("agent_state", "agent_step", "conversation_message", "action", "tool_call", "step_delta")
# ``step_delta`` is live-only: a step's model output while it is generated
# (runtime/base/live_output.py), never stored; the step row that follows is the record.
EPHEMERAL = ("step_delta",)
GAP = "gap"  # events were lost between agents.py and app.py: catch up (see the docstring)

EVENT_MAX_BYTES = 64 * 1024  # an event's data as JSON: a whole user message or task fits
STATE_MAX_BYTES = 8 * 1024   # an agent_state event's, and a session list row's (the agents page gets every one)
RESULT_MAX_BYTES = 2 * 1024  # a bigger result is summarised in an agent_state: its text, clipped
RESULT_TEXT_CHARS = 500
# Never left out of an event: what routes it and names its row (all short).
ROUTING_KEYS = frozenset({"id", "agent_id", "session_id", "conversation_id", "message_id", "iteration", "status",
                          "type", "name", "updated_at", "final", "attempt"})
# Never in an agent_state event or a list row: the session's own bookkeeping.
NOT_SUMMARISED = ("config", "pending_guidance", "used_guidance")


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


# ---- sizes --------------------------------------------------------------------

# Datetimes as ISO-8601 UTC with Z (as rows read over HTTP; a naive one is UTC),
# anything else JSON cannot encode as its text.  orjson: the relay encodes every
# event, and json.dumps + loads of one snapshot cost ~10x as much.
_JSON_OPTIONS = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC | orjson.OPT_NON_STR_KEYS


def _json(value) -> bytes:
    try:
        return orjson.dumps(value, default=str, option=_JSON_OPTIONS)
    except TypeError:  # what orjson refuses (an int beyond 64 bits): the standard library's JSON
        return json.dumps(value, default=_text, ensure_ascii=False).encode()


def _text(value) -> str:
    if isinstance(value, datetime):
        value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return str(value)


def _redacted(text: bytes) -> bytes:
    """Encoded JSON with secret-named keys' values replaced, as in the record
    (domain/redact.py): an event never carries what a table would not."""
    plain = text.decode()
    cleaned = redact_json_text(plain)
    return text if cleaned is plain else cleaned.encode()


def json_size(value) -> int:
    """Bytes of ``value`` as (UTF-8) JSON, as it is measured against the bounds."""
    return len(_json(value))


def bounded(data: dict, max_bytes: int = EVENT_MAX_BYTES) -> dict:
    """``data`` as plain JSON values, at most ``max_bytes`` as JSON: the largest
    fields (never :data:`ROUTING_KEYS`) are left out until it fits, each named
    in ``omitted`` with its size.  One encoding when it fits already."""
    return bounded_sized(data, max_bytes)[0]


def bounded_sized(data: dict, max_bytes: int = EVENT_MAX_BYTES) -> tuple[dict, int]:
    """:func:`bounded`, and the size of what it returns (the relay counts its buffer in bytes)."""
    text = _redacted(_json(data))
    plain = orjson.loads(text)
    if len(text) <= max_bytes:
        return plain, len(text)
    sizes = {key: json_size(value) for key, value in plain.items() if key not in ROUTING_KEYS and key != "omitted"}
    omitted = plain.setdefault("omitted", {})
    size = len(text)
    for key in sorted(sizes, key=sizes.__getitem__, reverse=True):
        del plain[key]
        omitted[key] = sizes[key]
        size = json_size(plain)
        if size <= max_bytes:
            break
    return plain, size


def session_summary(snapshot: dict, *, config: bool = False, state: bool = True,
                    max_bytes: int = STATE_MAX_BYTES) -> dict:
    """:func:`session_summary_sized` without the size."""
    return session_summary_sized(snapshot, config=config, state=state, max_bytes=max_bytes)[0]


def session_summary_sized(snapshot: dict, *, config: bool = False, state: bool = True,
                          max_bytes: int = STATE_MAX_BYTES) -> tuple[dict, int]:
    """A session's snapshot as an ``agent_state`` event (or a list row) carries
    it: without ``pending_guidance``/``used_guidance``, with ``config`` only when
    asked (it changed), with ``state`` unless ``state=False``, a big result
    summarised, bounded; and its size as JSON."""
    row = {key: value for key, value in snapshot.items()
           if key not in NOT_SUMMARISED and (state or key != "state")}
    if config and "config" in snapshot:
        row["config"] = snapshot["config"]
    result = row.get("result")
    if isinstance(result, dict) and (size := json_size(result)) > RESULT_MAX_BYTES:
        # The last output as a list shows it: its text, clipped; the whole result is the session's.
        text = result.get("text")
        if isinstance(text, str) and len(text) > RESULT_TEXT_CHARS:
            text = text[:RESULT_TEXT_CHARS] + "…"
        row["result"] = {"text": text if isinstance(text, str) else None}
        row["summarised"] = {"result": size}
    return bounded_sized(row, max_bytes)


class ConfigChanges:
    """Which sessions' configs changed since their last ``agent_state`` was
    built: a sender keeps one and asks :meth:`changed` for each snapshot.

    It holds the config each session was last seen with.  A session's config
    is replaced whole, never changed in place (runtime/session/agent.py
    ``replace_config``), and snapshots share its values, so the comparison is
    one identity check per key; a config read from the store compares by value.
    A finished session is forgotten (if it is woken, its config is sent again)."""

    def __init__(self):
        self._last: dict[str, dict] = {}

    def changed(self, snapshot: dict) -> bool:
        session_id, config = snapshot.get("session_id"), snapshot.get("config")
        before = self._last.get(session_id)
        if snapshot.get("status") in FINISHED_STATUSES:
            self._last.pop(session_id, None)
        else:
            self._last[session_id] = config
        return before is None or before != config


# ---- the token -------------------------------------------------------------------

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
