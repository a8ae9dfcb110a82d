"""``POST /api/tool-calls/bulk``: approve or deny every call waiting for approval
that matches a filter (Needs you's "Approve all" and "Deny all").

A bulk decision is the single ones many times over: one ``tool_approve`` or
``tool_deny`` action per call, queued in one commit, each applied by the worker
that owns the call's session at its next step boundary and each with its own
outcome (``GET /api/actions/<action_id>``).  A call settled meanwhile (answered
in another tab, its session destroyed) makes that one action fail with
``conflict:`` as a single approval would; the others are not affected.

Only calls waiting for approval are picked: questions and external results need
an answer each, which no bulk decision can give.  ``dry_run`` answers 200 with
what matches and queues nothing (the page shows the count before asking for
confirmation).  Approving many calls at once runs many tools, so it needs the
admin role (api/auth.py), as the fleet controls' resume and destroy do;
denying needs an operator.  A call acts on at most ``MAX_DECISIONS`` calls,
oldest first; ``remaining`` says how many were left for another call.
"""
from typing import Literal

from flask import Blueprint, jsonify
from pydantic import Field, StrictBool, model_validator

from api import auth
from api.context import ctx
from api.openapi import operation
from api.requests import body
from api.schemas import Id, Open, Strict
from api.routes.bulk import no_default
from api.sessions import queue

bp = Blueprint("decisions", __name__, url_prefix="/api")

MAX_DECISIONS = 500
PREVIEW_ROWS = 50
ACTION_TYPES = {"approve": "tool_approve", "deny": "tool_deny"}


class DecisionFilter(Strict):
    """Every filter given must hold (AND); none given matches every call waiting for approval."""

    tool: Id | None = Field(None, description="the tool's name")
    agent_id: Id | None = None
    session_id: Id | None = None
    ids: list[Id] | None = Field(None, min_length=1, max_length=MAX_DECISIONS, description="tool call ids")


class DecisionRequest(Strict):
    # the document states the rule below: a reason only with deny
    model_config = Strict.model_config | {"json_schema_extra": {"allOf": [
        {"if": {"properties": {"decision": {"not": {"const": "deny"}}}, "required": ["decision"]},
         "then": {"not": {"required": ["reason"]}}}]}}

    filter: DecisionFilter
    decision: Literal["approve", "deny"]
    reason: str = Field(None, min_length=1, max_length=4000, json_schema_extra=no_default(),
                        description="deny only: told to each model, as a single deny's reason")
    dry_run: StrictBool = Field(False, description="answer 200 with what matches; queue nothing")

    @model_validator(mode="after")
    def _reason_with_deny(self) -> "DecisionRequest":
        if "reason" in self.model_fields_set and self.decision != "deny":
            raise ValueError("reason goes only with deny")
        return self


class WaitingCall(Open):
    tool_call_id: str
    tool: str
    agent_id: str
    session_id: str
    iteration: int
    created_at: str
    name: str | None = Field(None, description="the session's name")


class DecisionPreview(Open):
    matched: int = Field(description="calls waiting for approval that match the filter")
    tools: dict[str, int] = Field(description="of them, how many per tool")
    calls: list[WaitingCall] = Field(description=f"the oldest matches (at most {PREVIEW_ROWS})")


class QueuedDecision(Open):
    tool_call_id: str
    session_id: str
    action_id: str


class DecisionsAccepted(Open):
    matched: int
    remaining: int = Field(description=f"matches left out: a call decides at most {MAX_DECISIONS}, oldest first")
    actions: list[QueuedDecision]


@bp.post("/tool-calls/bulk")
@operation(202, DecisionsAccepted, body=DecisionRequest, body_required=True, errors=(400, 401, 403),
           idempotent=True, also={200: (DecisionPreview, "dry_run: what matches; nothing queued")},
           operation_id="decideToolCalls")
def decide_tool_calls():
    """approve or deny every tool call waiting for approval that matches a filter
    (one queued action per call, oldest first)"""
    req: DecisionRequest = body()
    if req.decision == "approve" and not req.dry_run:
        auth.require("admin")
    f = req.filter
    calls = ctx().store.tool_calls
    where = dict(kind="approval", agent_id=f.agent_id, session_id=f.session_id, tool=f.tool, ids=f.ids)
    matched = calls.count_waiting(**where)
    if req.dry_run:
        rows = calls.waiting(**where, limit=PREVIEW_ROWS)
        names = ctx().store.states.get_many([r["session_id"] for r in rows], columns=("session_id", "name"))
        return jsonify({"matched": matched, "calls": [_call(r, names.get(r["session_id"])) for r in rows],
                        "tools": tools_of(calls.waiting_brief(**where))}), 200
    rows = calls.waiting(**where, limit=MAX_DECISIONS)
    payloads = [{"tool_call_id": r["id"], **({"reason": req.reason} if req.decision == "deny" else {})}
                for r in rows]

    def answer(actions):
        return {"matched": matched, "remaining": max(0, matched - len(actions)),
                "actions": [{"tool_call_id": p["tool_call_id"], "session_id": a["session_id"], "action_id": a["id"]}
                            for a, p in zip(actions, payloads)]}, 202
    body_, status, _ = queue(ACTION_TYPES[req.decision], [(r["agent_id"], r["session_id"]) for r in rows], {},
                             answer, payloads=payloads)
    return jsonify(body_), status


def _call(row: dict, session: dict | None) -> dict:
    return {"tool_call_id": row["id"], "tool": row["name"], "agent_id": row["agent_id"],
            "session_id": row["session_id"], "iteration": row["iteration"], "created_at": row["created_at"],
            "name": (session or {}).get("name")}


def tools_of(rows: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["name"]] = counts.get(row["name"], 0) + 1
    return dict(sorted(counts.items()))
