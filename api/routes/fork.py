"""``POST /api/sessions/<id>/fork``: time travel.

A fork is a new session of the same agent that continues from a past step of
another session: that step's state and next step token, optionally with
edited state, new guidance or changed config.  It is a *create* action with a
``fork`` section in its payload, so it goes through the queue, is idempotent
by ``session_id`` and shows as ``pending`` until applied, like any create.
The original session is only read, never written.

Numbering continues the original's: the fork's snapshot starts at
``from_iteration`` and its first own step is ``from_iteration + 1``.  Its
inherited steps stay in the original session (``forked_from`` links to them).
"""
import json
from typing import Any

from flask import Blueprint
from pydantic import Field, field_validator
from ulid import ULID

from api.context import ctx
from api.errors import ApiError
from api.openapi import operation
from api.requests import body, path_id
from api.schemas import MAX_CONFIG_BYTES, MAX_TEXT, NOT_BLANK, Accepted, Id, Strict, not_blank
from api.session_config import changed_config
from api.sessions import enqueue, repeated_session, started_session

bp = Blueprint("fork", __name__, url_prefix="/api")

MAX_STATE_BYTES = 256 * 1024


def _json_at_most(value, limit: int, what: str):
    """``value`` unchanged, unless it serialises to more than ``limit`` bytes."""
    if value is not None and len(json.dumps(value, default=str)) > limit:
        raise ValueError(f"{what} must serialise to at most {limit} bytes")
    return value


class ForkRequest(Strict):
    from_iteration: int = Field(ge=0, le=2**62, description="the step whose state and next step the fork starts from")
    state: dict[str, Any] | None = Field(None, description="replaces that step's state")
    guidance: str | None = Field(None, min_length=1, max_length=MAX_TEXT, json_schema_extra=NOT_BLANK,
                                 description="for the fork's first step (not blank)")
    config: dict[str, Any] | None = Field(None, description="keys that change the original's config")
    session_id: Id | None = Field(None, description="the fork's id; a client-supplied one makes the fork idempotent")

    @field_validator("state")
    @classmethod
    def _state_size(cls, value):
        return _json_at_most(value, MAX_STATE_BYTES, "state")

    @field_validator("config")
    @classmethod
    def _config_size(cls, value):
        return _json_at_most(value, MAX_CONFIG_BYTES, "config")

    @field_validator("guidance")
    @classmethod
    def _not_blank(cls, value):
        return value if value is None else not_blank(value, "guidance")


@bp.post("/sessions/<id:session_id>/fork")
@operation(202, Accepted, body=ForkRequest, errors=(400, 404, 409), idempotent=True,
           also={200: (Accepted, "the fork exists already (same session_id)")})
def fork_session(session_id):
    """a new session of the same agent continuing from a past step (optionally with edited state, guidance or
    config); the original is not changed"""
    session_id = path_id(session_id, "session_id")
    req: ForkRequest = body()
    store = ctx().store
    source = started_session(session_id, "fork")
    steps = store.steps.search(session_id=session_id, min_iteration=req.from_iteration,
                               max_iteration=req.from_iteration, limit=1)
    if not steps:
        raise ApiError(404, "not_found", f"session {session_id} has no step {req.from_iteration}")
    repeated = repeated_session(req.session_id, source["agent_id"])
    if repeated is not None:
        return repeated
    fork = {"session_id": session_id, "iteration": req.from_iteration}
    if req.state is not None:
        fork["state"] = req.state
    if req.guidance is not None:
        fork["guidance"] = req.guidance
    moniker = ctx().monikers.get(source["moniker"]) if source["moniker"] in ctx().monikers else None
    payload = {"moniker": source["moniker"], "task": source.get("task") or "",
               "config": changed_config(source.get("config"), req.config, moniker), "conversation_id": None,
               "fork": fork}
    if source.get("name"):
        payload["name"] = source["name"]  # the same agent: it keeps its name (not a generated tag)
    return enqueue("create", source["agent_id"], req.session_id or str(ULID()), payload)
