"""What waits on a person: answering ``ask_user`` questions, and the list of
every open question and approval (``GET /api/waiting``).

``POST /api/sessions/<id>/answer {text, tool_call_id?, user_id?}`` answers the
session's open question (``tool_call_id`` picks one when it has several;
default its oldest).  Like every control it queues an action (type
``answer``) and answers 202 (api/answers.py says how a 409 is decided).  A
user's message in the conversation where a question was posted answers it too
(api/routes/conversations.py).
"""
from typing import Any, Literal

from flask import Blueprint, jsonify
from pydantic import Field, field_validator

from api import schemas
from api.answers import question_of, submit_answer
from api.context import ctx
from api.openapi import operation
from api.requests import body, not_found, path_id, query
from api.sessions import session_view
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
    tool: schemas.Id | None = Field(None, description="the calls of this tool only")


class WaitingItem(schemas.Open):
    kind: Literal[KINDS]
    tool_call_id: str
    tool: str
    agent_id: str
    session_id: str
    iteration: int
    created_at: str
    args: Any = None
    step_text: str | None = Field(None, description="what the step that made the call said (first 500 characters)")
    question: str | None = None
    choices: list[str] | None = None
    default: str | None = None
    deadline: str | None = Field(None, description="when an unanswered question gets its default")
    session: dict | None = Field(None, description="name, task (first 500 characters), moniker, status, parent "
                                                   "and root of the session")


class WaitingList(schemas.Open):
    waiting: list[WaitingItem]
    total: int
    tools: dict[str, int] = Field(description="how many calls of each tool wait, under every filter but tool "
                                              "(Needs you's tool filter lists them)")
    kinds: dict[str, int] = Field(description="how many of each kind wait, under every filter but kind")
    limit: int
    offset: int


# ---- answering --------------------------------------------------------------

@bp.post("/sessions/<id:session_id>/answer")
@operation(202, AnswerAccepted, body=AnswerRequest, errors=(400, 404, 409), idempotent=True)
def answer(session_id):
    """answer the session's open ask_user question (409: none open, answered, timed out, or an answer
    is queued already)"""
    session_id = path_id(session_id, "session_id")
    req: AnswerRequest = body()
    if session_view(session_id) is None:
        raise not_found("session", session_id)
    question = question_of(session_id, req.tool_call_id)
    accepted, status = submit_answer(question, req.text, req.user_id, "api")
    return jsonify(accepted), status


# ---- GET /api/waiting ---------------------------------------------------------

def _kind(row: dict) -> str:
    if row["status"] == "waiting_approval":
        return "approval"
    return "question" if row["name"] == ask_user.NAME else "result"


SESSION_FIELDS = ("name", "moniker", "status", "status_reason", "conversation_id", "parent_agent_id",
                  "parent_session_id")


CONTEXT_CHARS = 500  # of the task and of the step's text, on each item


def _clip(text: str | None) -> str | None:
    return text if text is None or len(text) <= CONTEXT_CHARS else text[:CONTEXT_CHARS] + "…"


def _item(row: dict, snapshot: dict | None, step_text: str | None = None) -> dict:
    item = {"kind": _kind(row), "tool_call_id": row["id"], "tool": row["name"], "agent_id": row["agent_id"],
            "session_id": row["session_id"], "iteration": row["iteration"], "created_at": row["created_at"],
            "args": row.get("args"), "step_text": _clip(step_text)}
    if row["name"] == ask_user.NAME and (parsed := ask_user.parse_args(row.get("args"))) is not None:
        deadline = ask_user.deadline(row)
        item.update(question=parsed.question, choices=parsed.choices, default=parsed.default,
                    deadline=deadline.isoformat() if deadline else None)
    if snapshot is not None:
        item["session"] = {**{k: snapshot.get(k) for k in SESSION_FIELDS}, "task": _clip(snapshot.get("task"))}
    return item


def facets(rows: list[dict], q: WaitingQuery) -> tuple[dict[str, int], dict[str, int]]:
    """Counts by tool (of the kind asked) and by kind (of the tool asked): what
    the page's two filters would show if changed."""
    tools: dict[str, int] = {}
    kinds = {kind: 0 for kind in KINDS}
    for row in rows:
        kind = _kind(row)
        if q.kind in (None, kind):
            tools[row["name"]] = tools.get(row["name"], 0) + 1
        if q.tool in (None, row["name"]):
            kinds[kind] += 1
    return dict(sorted(tools.items())), kinds


@bp.get("/waiting")
@operation(200, WaitingList, query=WaitingQuery)
def list_waiting():
    """every open question and tool approval (and external result) across all agents, oldest first"""
    q: WaitingQuery = query()
    store = ctx().store
    where = dict(kind=q.kind, agent_id=q.agent_id, session_id=q.session_id, tool=q.tool)
    rows = store.tool_calls.waiting(**where, limit=q.limit, offset=q.offset)
    total = store.tool_calls.count_waiting(**where)
    tools, kinds = facets(store.tool_calls.waiting_brief(agent_id=q.agent_id, session_id=q.session_id), q)
    snapshots = store.states.get_many([r["session_id"] for r in rows],
                                      columns=("session_id", "task", *SESSION_FIELDS))
    texts = store.steps.texts_at((r["session_id"], r["iteration"]) for r in rows)
    return jsonify({"waiting": [_item(r, snapshots.get(r["session_id"]), texts.get((r["session_id"], r["iteration"])))
                                for r in rows], "total": total, "tools": tools, "kinds": kinds,
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
