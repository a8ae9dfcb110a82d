"""``POST /api/sessions/<id>/replay``: re-run a recorded session under other settings.

A replay is a new session of the same agent, made by a *create* action (so it
goes through the queue, is idempotent by ``session_id`` and resumes after a
crash), that re-runs the source's steps from ``from_iteration`` with the
overrides applied, with recorded tool results served instead of run and what
arrived from outside delivered at the iteration it arrived then
(runtime/session/replay.py).  The source session is only read.
"""
from flask import Blueprint
from ulid import ULID

from api.openapi import operation
from api.replays import ReplayRequest, replay_payload
from api.requests import body, path_id
from api.schemas import Accepted
from api.sessions import enqueue, repeated_session, started_session

bp = Blueprint("replay", __name__, url_prefix="/api")


@bp.post("/sessions/<id:session_id>/replay")
@operation(202, Accepted, body=ReplayRequest, errors=(400, 404, 409), idempotent=True,
           also={200: (Accepted, "the replay exists already (same session_id)")})
def replay_session(session_id):
    """a new session of the same agent re-running a recorded session's steps under another model, prompt, profile
    or moniker, with the recorded tool results served (tools=recorded) and outside input delivered at the same
    iteration; the source is not changed"""
    session_id = path_id(session_id, "session_id")
    req: ReplayRequest = body()
    source = started_session(session_id, "replay")
    repeated = repeated_session(req.session_id, source["agent_id"])
    if repeated is not None:
        return repeated
    return enqueue("create", source["agent_id"], req.session_id or str(ULID()), replay_payload(source, req))
