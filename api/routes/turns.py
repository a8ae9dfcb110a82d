"""``GET /api/sessions/<id>/turns``: a session's turns (runtime/record/turn_tracker.py).

A turn is the run of steps from a trigger (the create, a user's message or
guidance, a child's result, an answer) until the agent waits or finishes; each
row says which steps it holds (``first_iteration``..``last_iteration``), what
started it, how it ended, what it used, and a summary once it has ended.
"""
from typing import Literal

from flask import Blueprint, jsonify
from pydantic import Field

from api.context import ctx
from api.openapi import operation
from api.requests import not_found, path_id, query
from api.schemas import Open, Strict
from api.sessions import session_view

bp = Blueprint("turns", __name__, url_prefix="/api")


class TurnQuery(Strict):
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=1_000_000)
    order: Literal["oldest", "newest"] = Field("oldest", description="by turn number")


class Turn(Open):
    id: str
    session_id: str
    agent_id: str
    turn: int = Field(description="0, 1, 2... within the session")
    status: Literal["open", "ended"]
    end_reason: str | None = Field(None, description="the session's status:reason when the turn ended, "
                                                     "e.g. waiting:user, done:done, error:step_failed:error")
    first_iteration: int
    last_iteration: int | None = Field(None, description="set when the turn ends")
    steps: int | None = None
    trigger_kind: str = Field(description="create | fork | guidance | message | child_result | answer | resume")
    trigger_ids: list[str] | None = Field(None, description="ids of the actions (or events) that brought the trigger")
    trigger_text: str | None = None
    usage: dict | None = None
    summary: str | None = None
    summary_method: Literal["llm", "extractive"] | None = None
    summary_data: dict | None = None
    started_at: str
    ended_at: str | None = None
    updated_at: str


class TurnList(Open):
    turns: list[Turn]
    total: int
    limit: int
    offset: int


@bp.get("/sessions/<id:session_id>/turns")
@operation(200, TurnList, query=TurnQuery, errors=(400, 404))
def list_turns(session_id):
    """the session's turns (steps from a trigger until the agent waits or finishes), with summaries"""
    session_id = path_id(session_id, "session_id")
    q: TurnQuery = query()
    if session_view(session_id) is None:
        raise not_found("session", session_id)
    turns = ctx().store.turns
    rows = turns.page(session_id, limit=q.limit, offset=q.offset, newest_first=q.order == "newest")
    return jsonify({"turns": rows, "total": turns.count(session_id), "limit": q.limit, "offset": q.offset})
