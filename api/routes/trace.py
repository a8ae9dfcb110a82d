"""``GET /api/sessions/<id>/trace``: a session's waterfall, a window of steps at a time.

Each step of the window as a span with its model attempts and its tool calls
(approval waits apart from run time, questions' waits for the user), the
session's own span, and its sub-agents with the step that spawned each, so the
dashboard's trace page (web/static/js/pages/trace.js) nests them and links to
their own traces.  The spans are worked out by api/trace_spans.py from the
record as the store reads it; only the columns a span needs are read (no
states), so a window of 500 steps stays cheap however long the session is.

The window is ``limit`` iterations from ``from_iteration`` (default: the
session's first own step); ``earlier`` and ``later`` are the
``from_iteration`` of the windows beside it, null at either end.
"""
from flask import Blueprint, jsonify
from pydantic import Field

from api.context import ctx
from api.openapi import operation
from api.requests import not_found, path_id, query
from api.schemas import Open, Strict
from api.sessions import first_own_iteration, session_view
from api.trace_spans import trace
from store.codec import iso, utcnow

bp = Blueprint("trace", __name__, url_prefix="/api")

DEFAULT_LIMIT = 200
MAX_LIMIT = 500
MAX_CALLS = 10_000  # tool calls read per window (a step asks for a handful)


class TraceQuery(Strict):
    from_iteration: int | None = Field(None, ge=0, le=2**62, description="the window's first iteration (default: "
                                                                          "the session's first own step)")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="iterations in the window at most")


class AttemptSpan(Open):
    n: int
    outcome: str = Field(description="ok, timeout, 5xx, 429, unparseable, cancelled, unreachable or error")
    start: str = Field(description="derived: a step's attempts are placed one after the other from its start")
    duration_ms: float
    input_tokens: int
    output_tokens: int
    structured: str | None = Field(description="the call's structured-output mode (json_schema, grammar, …)")
    model: str | None
    error: str | None


class ToolCallSpan(Open):
    id: str
    name: str
    status: str
    seq: int | None
    created_at: str | None = Field(description="when the step asked for it")
    approval_wait_ms: float | None = Field(description="time waiting for a person's approval (null: none needed)")
    run_start: str | None
    run_ms: float | None = Field(description="from its start to its end (or to now while it runs)")
    end: str | None
    question: bool = Field(description="an ask_user call")
    user_wait_ms: float | None = Field(description="a question's wait for the user's answer (to now while open)")
    open: bool = Field(description="not ended yet")
    error: str | None
    child_session_id: str | None = Field(description="the sub-agent a spawn_agent call started")


class StepSpan(Open):
    iteration: int
    status: str
    start: str = Field(description="its end less its latency")
    end: str = Field(description="when the step was recorded")
    duration_ms: float | None
    input_tokens: int
    output_tokens: int
    error: str | None
    attempts: list[AttemptSpan]
    tool_calls: list[ToolCallSpan]


class SessionSpan(Open):
    start: str
    end: str = Field(description="its last change when finished, else now")
    duration_ms: float | None
    open: bool = Field(description="not finished: its span runs to now")


class TraceChild(Open):
    session_id: str
    name: str | None
    status: str
    created_at: str | None
    updated_at: str | None
    spawned_at_iteration: int | None = Field(description="the step whose spawn_agent call started it")


class Trace(Open):
    session_id: str
    agent_id: str
    name: str | None
    status: str
    now: str = Field(description="the service's clock when it answered (open spans end here)")
    session: SessionSpan
    first_iteration: int = Field(description="the session's first own step")
    last_iteration: int = Field(description="its newest step (-1: none yet)")
    from_iteration: int
    limit: int
    earlier: int | None = Field(description="from_iteration of the window before this one, or null")
    later: int | None = Field(description="from_iteration of the window after this one, or null")
    steps: list[StepSpan]
    children: list[TraceChild]
    calls_truncated: bool = Field(description="the window's tool calls were cut at the read's cap")


@bp.get("/sessions/<id:session_id>/trace")
@operation(200, Trace, query=TraceQuery, errors=(400, 404))
def session_trace(session_id):
    """a session's waterfall: a window of its steps as spans with their model attempts and tool calls (approval
    waits and questions' waits apart from run time), its own span, and its sub-agents"""
    session_id = path_id(session_id, "session_id")
    q: TraceQuery = query()
    view = session_view(session_id)
    if view is None:
        raise not_found("session", session_id)
    store, now = ctx().store, utcnow()
    floor = first_own_iteration(view)
    lo = q.from_iteration if q.from_iteration is not None else floor
    hi = lo + q.limit - 1
    steps, calls, children = [], [], []
    if view.get("status") != "pending":
        steps = store.steps.timings(session_id, lo, hi)
        calls = store.tool_calls.of_steps(session_id, lo, hi, limit=MAX_CALLS + 1) if steps else []
        children = store.states.children(session_id)
    truncated = len(calls) > MAX_CALLS
    calls = calls[:MAX_CALLS]
    spawned_at = store.tool_calls.iterations_of(c["session_id"] for c in children)
    last = max([view.get("iteration", -1)] + [s["iteration"] for s in steps])
    out = trace(view, steps, calls, children, spawned_at, now)
    return jsonify({"session_id": session_id, "agent_id": view["agent_id"], "name": view.get("name"),
                    "status": view["status"], "now": iso(now), "session": out["session"],
                    "first_iteration": floor, "last_iteration": last, "from_iteration": lo, "limit": q.limit,
                    "earlier": max(floor, lo - q.limit) if lo > floor else None,
                    "later": hi + 1 if hi < last else None,
                    "steps": out["steps"], "children": out["children"], "calls_truncated": truncated})
