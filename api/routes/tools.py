"""Routes of tools and tool calls (StepFrame-v1).

Reads come from the store; approve, deny and result are controls like any
other: they append an action to the queue and answer 202 with its id, and the
worker that owns the session applies them in order with the session's other
actions (runtime/dispatch/tool_controls.py).

Where a 409 is decided: twice.  Here, at accept time, from the row's current
status (approve/deny need ``waiting_approval``, result needs
``waiting_result``): a request for a call that is plainly not waiting is
refused at once.  And again when the action is applied, against the row as it
is then: of two approvals accepted while the call was still waiting, the
first applies and the second ends ``failed`` with a message starting with
``conflict:`` (``GET /api/actions/<id>``), so a racing second decision can
never apply twice.
"""
from domain.statuses import ToolCallStatus
from datetime import datetime
from typing import Any, Literal

from flask import Blueprint, current_app, jsonify
from pydantic import ConfigDict, Field, field_validator, model_validator

from api import schemas
from api.context import ctx
from api.errors import ApiError
from api.openapi import operation
from api.requests import IdConverter, body, not_found, path_id, query
from api.sessions import enqueue
from tools import args_check, catalog

bp = Blueprint("tools", __name__, url_prefix="/api")

STATUSES = tuple(ToolCallStatus)


class ToolCallIdConverter(IdConverter):
    """A tool call id in a path; never ``bulk`` (that path is POST
    /api/tool-calls/bulk, api/routes/decisions.py), so ``OPTIONS
    /api/tool-calls/bulk`` allows POST only."""

    regex = r"(?!bulk(?:/|$))[^/]+"
    openapi_schema = {"type": "string", "pattern": "^(?!bulk$)" + IdConverter.openapi_schema["pattern"][1:]}


@bp.record_once
def _converters(state) -> None:
    state.app.url_map.converters["tool_call_id"] = ToolCallIdConverter


EXTENSION = "agentsvc_tools"  # app.extensions key of this app's own ToolRegistry


def registry():
    return current_app.extensions[EXTENSION]


# ---- models ---------------------------------------------------------------

class ToolCallQuery(schemas.Page):
    session_id: schemas.Id | None = None
    agent_id: schemas.Id | None = None
    name: schemas.Id | None = Field(None, description="tool name")
    status: Literal[STATUSES] | None = None
    since: datetime | None = Field(None, description="ISO-8601; calls made at or after it")

    @field_validator("since", mode="before")
    @classmethod
    def _since_is_iso(cls, value):
        return schemas.since_is_iso(value)

    @field_validator("since")
    @classmethod
    def _since_in_range(cls, value: datetime | None) -> datetime | None:
        return schemas.clamp_to_calendar(value)


class ApproveRequest(schemas.Strict):
    args: dict[str, Any] | None = Field(None, description="run the call with these args instead of the model's "
                                                         "(checked against the tool's args_schema); the row keeps "
                                                         "the model's as original_args")


class DenyRequest(schemas.Strict):
    reason: str | None = Field(None, max_length=4000, description="told to the model")


class ResultRequest(schemas.Strict):
    # the document states the rule below: a result (error absent or null), or an error and no result
    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": [
        {"required": ["result"], "properties": {"error": {"type": "null"}}},
        {"required": ["error"], "properties": {"error": {"type": "string"}}, "not": {"required": ["result"]}},
    ]})

    result: Any = Field(None, description="the tool's result (any JSON); capped like any tool result")
    error: str | None = Field(None, min_length=1, max_length=4000, description="or: why the tool failed")

    @model_validator(mode="after")
    def _one(self) -> "ResultRequest":
        if ("result" in self.model_fields_set) == ("error" in self.model_fields_set and self.error is not None):
            raise ValueError("give exactly one of result or error")
        return self


class McpToolInfo(schemas.Open):
    server: str
    tool: str
    status: str
    error: str | None = None


class ToolInfo(schemas.Open):
    name: str
    description: str
    args_schema: dict
    timeout_s: float
    idempotent: bool
    needs_approval: bool
    external: bool
    source: Literal["installed", "mcp"] = Field("installed", description="mcp: offered by an operator's MCP server")
    mcp: McpToolInfo | None = Field(None, description="the MCP server's status as the worker last saw it")
    workers: list[str] = Field(default_factory=list, description="agents.py workers that offer it")


class ToolList(schemas.Open):
    tools: list[ToolInfo]


class ToolCall(schemas.Open):
    id: str
    agent_id: str
    session_id: str
    iteration: int
    seq: int
    call_id: str | None = None
    name: str
    args: Any = None
    original_args: Any = Field(None, description="the model's args, when a person changed them before approving")
    status: Literal[STATUSES]
    result: Any = None
    error: str | None = None
    attempts: int
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    duration_ms: float | None = None
    usage: Any = None


class ToolCallList(schemas.Open):
    tool_calls: list[ToolCall]
    limit: int
    offset: int


class ToolCallAccepted(schemas.Accepted):
    tool_call_id: str


# ---- routes ---------------------------------------------------------------

@bp.get("/tools")
@operation(200, ToolList, errors=())
def list_tools():
    """installed tools with their args' JSON schema

    Every worker's recorded catalog (MCP tools included: app.py starts no MCP
    server) over this app's own built-ins and plugins."""
    return jsonify({"tools": catalog.list_tools(ctx().store, registry())})


@bp.get("/tool-calls")
@operation(200, ToolCallList, query=ToolCallQuery)
def list_tool_calls():
    """tool calls, in the order they were made"""
    q: ToolCallQuery = query()
    rows = ctx().store.tool_calls.search(session_id=q.session_id, agent_id=q.agent_id, name=q.name,
                                         status=q.status, since=q.since, limit=q.limit, offset=q.offset)
    return jsonify({"tool_calls": rows, "limit": q.limit, "offset": q.offset})


def _call(tool_call_id: str) -> dict:
    tool_call_id = path_id(tool_call_id, "tool_call_id")
    row = ctx().store.tool_calls.get(tool_call_id)
    if row is None:
        raise not_found("tool call", tool_call_id)
    return row


@bp.get("/tool-calls/<tool_call_id:tool_call_id>")
@operation(200, ToolCall, errors=(400, 404))
def get_tool_call(tool_call_id):
    """one tool call"""
    return jsonify(_call(tool_call_id))


def _control(tool_call_id: str, type_: str, expected: str, payload: dict):
    row = _call(tool_call_id)
    if row["status"] != expected:
        raise ApiError(409, "conflict", f"tool call {row['id']} is {row['status']}; this needs it {expected}")
    response, status = enqueue(type_, row["agent_id"], row["session_id"], {"tool_call_id": row["id"], **payload})
    return jsonify({**response.get_json(), "tool_call_id": row["id"]}), status


@bp.post("/tool-calls/<id:tool_call_id>/approve")
@operation(202, ToolCallAccepted, body=ApproveRequest, errors=(400, 404, 409), idempotent=True)
def approve_tool_call(tool_call_id):
    """approve a call waiting for approval, as the model asked it or with edited args
    (400: they do not fit the tool; 409 unless waiting_approval)"""
    req: ApproveRequest = body()
    if req.args is None:
        return _control(tool_call_id, "tool_approve", "waiting_approval", {})
    row = _call(tool_call_id)
    tools = registry()
    if row["name"] in tools:  # an MCP tool is known to the workers only: they check it
        problem = args_check.args_problem(tools.get(row["name"]), req.args)
        if problem:
            raise ApiError(400, "invalid_args", problem)
    return _control(tool_call_id, "tool_approve", "waiting_approval", {"args": req.args})


@bp.post("/tool-calls/<id:tool_call_id>/deny")
@operation(202, ToolCallAccepted, body=DenyRequest, errors=(400, 404, 409), idempotent=True)
def deny_tool_call(tool_call_id):
    """deny a call waiting for approval; the reason is told to the model"""
    req: DenyRequest = body()
    return _control(tool_call_id, "tool_deny", "waiting_approval", {"reason": req.reason})


@bp.post("/tool-calls/<id:tool_call_id>/result")
@operation(202, ToolCallAccepted, body=ResultRequest, errors=(400, 404, 409), body_required=True,
           idempotent=True)
def post_tool_result(tool_call_id):
    """post the result (or error) of a call waiting for one (409 unless waiting_result)"""
    req: ResultRequest = body()
    payload = {"error": req.error} if req.error is not None else {"result": req.result}
    return _control(tool_call_id, "tool_result", "waiting_result", payload)
