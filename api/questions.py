"""What waits on a person: answering ``ask_user`` questions, and the list of
every open question and approval (``GET /api/waiting``).

``POST /api/sessions/<id>/answer {text, tool_call_id?, user_id?}`` answers the
session's open question (``tool_call_id`` picks one when it has several;
default its oldest).  Like every control it queues an action (type
``answer``) and answers 202; the session's worker applies it
(runtime/questions.py).  A 409 is decided at accept time (no open question,
the call was answered or timed out, or an answer to it is already queued) and
again when the action is applied, so of two racing answers exactly one
applies and the other's action ends ``failed`` with ``conflict:``.

A user's message in a conversation where an open question was posted is
routed here too (:func:`route_reply`, called by api/conversations.py): it
becomes that question's answer instead of guidance for the conversation's
agents.  ``data.tool_call_id`` on the message picks the question when several
are open there; otherwise the oldest is answered.
"""
from typing import Any, Literal

from flask import Blueprint, jsonify
from pydantic import Field, field_validator

from api import schemas
from api.errors import ApiError
from api.routes import args, body, ctx, enqueue, not_found, path_id, session_view
from tools import ask_user

bp = Blueprint("questions", __name__, url_prefix="/api")

KINDS = ("question", "approval", "result")


# ---- models ---------------------------------------------------------------

class AnswerRequest(schemas.Strict):
    text: str = Field(min_length=1, max_length=ask_user.MAX_ANSWER, description="the answer (not blank)",
                      json_schema_extra=schemas.NOT_BLANK)
    tool_call_id: schemas.Id | None = Field(None, description="which question; default the session's oldest open one")
    user_id: schemas.Id | None = Field(None, description="who answers; default 'user'")

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return schemas.not_blank(value, "text")


class AnswerAccepted(schemas.Accepted):
    tool_call_id: str


class WaitingQuery(schemas.Page):
    kind: Literal[KINDS] | None = Field(None, description="question (ask_user), approval, or result (another "
                                                          "external tool's result); default all")
    agent_id: schemas.Id | None = None
    session_id: schemas.Id | None = None


class WaitingItem(schemas.Open):
    kind: Literal[KINDS]
    tool_call_id: str
    tool: str
    agent_id: str
    session_id: str
    iteration: int
    created_at: str
    args: Any = None
    question: str | None = None
    choices: list[str] | None = None
    default: str | None = None
    deadline: str | None = Field(None, description="when an unanswered question gets its default")
    session: dict | None = Field(None, description="name, moniker, status, parent and root of the session")


class WaitingList(schemas.Open):
    waiting: list[WaitingItem]
    total: int
    limit: int
    offset: int


MODELS = [AnswerRequest, AnswerAccepted, WaitingQuery, WaitingItem, WaitingList]


# ---- answering --------------------------------------------------------------

def _answer_queued(session_id: str, tool_call_id: str) -> bool:
    """An answer to this call is already in the queue (not yet applied)."""
    for status in ("pending", "processing"):
        for action in ctx().store.actions.search(session_id=session_id, type="answer", status=status, limit=1000):
            if (action.get("payload") or {}).get("tool_call_id") == tool_call_id:
                return True
    return False


def _question_of(session_id: str, tool_call_id: str | None) -> dict:
    store = ctx().store
    if tool_call_id is None:
        open_ = store.tool_calls.open_questions(session_id)
        if not open_:
            raise ApiError(409, "conflict", f"session {session_id} has no open question")
        return open_[0]
    row = store.tool_calls.get(tool_call_id)
    if row is None or row["session_id"] != session_id:
        raise not_found(f"tool call of session {session_id}", tool_call_id)
    if row["name"] != ask_user.NAME:
        raise ApiError(409, "conflict", f"tool call {tool_call_id} is a {row['name']!r} call, not a question")
    if row["status"] != "waiting_result":
        raise ApiError(409, "conflict", f"question {tool_call_id} is {row['status']}: it was answered already "
                                        "or timed out")
    return row


def submit_answer(question: dict, text: str, user_id: str | None, via: str, source: dict | None = None):
    """Queue the answer action (refusing a second answer while one is queued)."""
    with ctx().create_lock:  # two answers racing inside this process: the second sees the first queued
        if _answer_queued(question["session_id"], question["id"]):
            raise ApiError(409, "conflict", f"question {question['id']} has an answer queued already")
        payload = {"tool_call_id": question["id"], "text": text, "user_id": user_id or "user", "via": via}
        if source:
            payload["source"] = source
        return enqueue("answer", question["agent_id"], question["session_id"], payload)


@bp.post("/sessions/<session_id>/answer")
def answer(session_id):
    session_id = path_id(session_id, "session_id")
    req: AnswerRequest = body(AnswerRequest)
    if session_view(session_id) is None:
        raise not_found("session", session_id)
    question = _question_of(session_id, req.tool_call_id)
    response, status = submit_answer(question, req.text, req.user_id, "api")
    return jsonify({**response.get_json(), "tool_call_id": question["id"]}), status


def route_reply(conversation_id: str, data: dict | None) -> dict | None:
    """The open question a user's message in this conversation answers, or None.

    A question counts when it was posted to this conversation (its message id
    is its tool call's id) and still waits; ``data.tool_call_id`` picks one of
    several (and a reply naming a question that is closed answers none), else
    the oldest.  An answer already queued for it does not count, so a reply to
    it goes on as ordinary guidance."""
    store = ctx().store
    asked_here = store.conversations.question_ids(conversation_id)
    here = [q for q in store.tool_calls.open_among(asked_here) if not _answer_queued(q["session_id"], q["id"])]
    wanted = (data or {}).get("tool_call_id")
    if wanted is not None:  # a reply to one question never answers another
        return next((q for q in here if q["id"] == wanted), None)
    return here[0] if here else None


# ---- GET /api/waiting ---------------------------------------------------------

def _kind(row: dict) -> str:
    if row["status"] == "waiting_approval":
        return "approval"
    return "question" if row["name"] == ask_user.NAME else "result"


SESSION_FIELDS = ("name", "moniker", "status", "status_reason", "conversation_id", "parent_agent_id",
                  "parent_session_id")


def _item(row: dict, snapshot: dict | None) -> dict:
    item = {"kind": _kind(row), "tool_call_id": row["id"], "tool": row["name"], "agent_id": row["agent_id"],
            "session_id": row["session_id"], "iteration": row["iteration"], "created_at": row["created_at"],
            "args": row.get("args")}
    if row["name"] == ask_user.NAME and (parsed := ask_user.parse_args(row.get("args"))) is not None:
        deadline = ask_user.deadline(row)
        item.update(question=parsed.question, choices=parsed.choices, default=parsed.default,
                    deadline=deadline.isoformat() if deadline else None)
    if snapshot is not None:
        item["session"] = {k: snapshot.get(k) for k in SESSION_FIELDS}
    return item


@bp.get("/waiting")
def list_waiting():
    q: WaitingQuery = args(WaitingQuery)
    store = ctx().store
    rows = store.tool_calls.waiting(kind=q.kind, agent_id=q.agent_id, session_id=q.session_id, limit=q.limit,
                                    offset=q.offset)
    total = store.tool_calls.count_waiting(kind=q.kind, agent_id=q.agent_id, session_id=q.session_id)
    snapshots = store.states.get_many([r["session_id"] for r in rows], columns=("session_id", *SESSION_FIELDS))
    return jsonify({"waiting": [_item(r, snapshots.get(r["session_id"])) for r in rows], "total": total,
                    "limit": q.limit, "offset": q.offset})


class WaitingCollector:
    """``agentsvc_waiting{kind}``: what waits for a person (questions, approvals)
    or for an external result, as ``GET /api/waiting`` counts it, at scrape time."""

    def __init__(self, store):
        self.store = store

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("agentsvc_waiting", "tool calls waiting for a person or an external result",
                                   labels=["kind"])
        for kind in KINDS:
            family.add_metric([kind], self.store.tool_calls.count_waiting(kind=kind))
        yield family


# ---- OpenAPI --------------------------------------------------------------------

def openapi_paths(op, path, query) -> dict:
    return {
        "/api/sessions/{session_id}/answer": {"post": op(
            "answer the session's open ask_user question (409: none open, answered, timed out, or an answer "
            "is queued already)", 202, ok_model=AnswerAccepted, body=AnswerRequest, params=[path("session_id")],
            errors=(400, 404, 409))},
        "/api/waiting": {"get": op("every open question and tool approval (and external result) across all "
                                   "agents, oldest first", 200, ok_model=WaitingList, params=query(WaitingQuery))},
    }
