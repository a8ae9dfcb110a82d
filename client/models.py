"""Typed models of what the client sends and what the service answers.

They are written here, not imported from api/: the client is for programs
that do not have the service's code (it imports nothing of the repo).  That
they say what the service says is checked against the service's own OpenAPI
document: tests/client_contract.py compares every model with the component
schema named in :data:`COMPONENTS` (each field the model declares is in the
document with a type the model accepts; each field the document requires is
in the model), in a unit test and against a live service.

Answers accept fields the models do not name (``extra="allow"``): a service
newer than the client adds fields without breaking it.  :meth:`Model.as_dict`
gives back what the service sent, no more (no defaults filled in), which is
what the command line prints with ``--json``.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")

    def as_dict(self) -> dict:
        """The document as the service sent it (fields it left out stay out)."""
        return self.model_dump(mode="json", exclude_unset=True)


class Request(BaseModel):
    """A request body: only the fields given are sent (the service's defaults apply to the rest)."""
    model_config = ConfigDict(extra="forbid")

    def body(self) -> dict:
        return self.model_dump(mode="json", exclude_none=True)


# ---- answers -----------------------------------------------------------------------

class Accepted(Model):
    """202 (or 200 for a repeated create): a queued action and the session it is for."""
    agent_id: str
    session_id: str
    action_id: str | None
    status: str


class ToolCallAccepted(Accepted):
    tool_call_id: str


class AnswerAccepted(Accepted):
    tool_call_id: str


ActionStatus = Literal["pending", "processing", "done", "failed"]


class Action(Model):
    id: str
    type: str
    status: ActionStatus
    agent_id: str | None = None
    session_id: str | None = None
    created_at: str
    processed_at: str | None = None
    error: str | None = None
    attempts: int
    actor: str | None = None


class Snapshot(Model):
    """A session: its status, iteration, usage, state and result (``GET /api/sessions/<id>``);
    a list row or an ``agent_state`` event carries the same, summarised."""
    agent_id: str
    session_id: str
    name: str | None = None
    moniker: str
    status: str
    status_reason: str | None = None
    usage: Any = None
    iteration: int
    task: str | None = None
    next_step_token: str | None = None
    state: Any = None
    result: Any = None
    last_error: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    parent_agent_id: str | None = None
    parent_session_id: str | None = None
    parent_name: str | None = None
    root_session_id: str | None = None


class Step(Model):
    id: str
    agent_id: str
    session_id: str
    iteration: int
    status: str
    step_token: str | None = None
    next_step_token: str | None = None
    text: str | None = None
    data: Any = None
    state: Any = None
    guidance: Any = None
    created_at: str


class AgentList(Model):
    """One page of ``GET /api/agents``."""
    agents: list[Snapshot]
    total: int
    counts: dict[str, int]
    limit: int
    offset: int


ToolCallStatus = Literal["pending", "waiting_approval", "waiting_result", "running", "success", "failed", "denied",
                         "unknown", "replayed"]


class ToolCall(Model):
    id: str
    agent_id: str
    session_id: str
    iteration: int
    seq: int
    call_id: str | None = None
    name: str
    args: Any = None
    original_args: Any = None
    status: ToolCallStatus
    result: Any = None
    error: str | None = None
    attempts: int
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    duration_ms: float | None = None
    usage: Any = None


class WaitingItem(Model):
    """A question, approval or external result that waits on a person (``GET /api/waiting``)."""
    kind: Literal["question", "approval", "result"]
    tool_call_id: str
    tool: str
    agent_id: str
    session_id: str
    iteration: int
    created_at: str
    args: Any = None
    step_text: str | None = None
    question: str | None = None
    choices: list[str] | None = None
    default: str | None = None
    deadline: str | None = None
    session: dict | None = None


class WaitingList(Model):
    waiting: list[WaitingItem]
    total: int
    tools: dict[str, int]
    kinds: dict[str, int]
    limit: int
    offset: int


class Message(Model):
    message_id: str
    conversation_id: str
    created_at: str
    sender_type: Literal["user", "agent"]
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    text: str | None = None
    data: Any = None
    iteration: int | None = None
    name: str | None = None


class Delivery(Model):
    agent_id: str
    session_id: str
    action_id: str


class Posted(Model):
    message: Message
    deliveries: list[Delivery]
    answer: dict | None = None


class SessionDiff(Model):
    """Two sessions of one lineage step by step (``GET /api/sessions/<id>/diff``)."""
    session_id: str
    against: str
    lineage: dict
    from_iteration: int
    a: dict
    b: dict
    iterations: list[dict]
    first_divergence: dict | None
    summary: dict


class EvalSet(Model):
    id: str
    name: str
    session_ids: list[str]
    from_iteration: int
    search: dict | None = None
    created_at: str


class EvalSetList(Model):
    evalsets: list[EvalSet]


class EvalRun(Model):
    id: str
    evalset_id: str
    status: str
    scorers: list[str]
    progress: dict
    summary: dict


class EvalRunDetail(EvalRun):
    results: list[dict]


class EvalRunList(Model):
    """A set's runs side by side (``GET /api/evalsets/<id>/runs``)."""
    evalset: EvalSet
    runs: list[EvalRun]
    sessions: list[dict]
    comparisons: list[dict]


class WhoAmI(Model):
    auth: bool
    name: str | None
    role: Literal["viewer", "operator", "admin"]


# ---- requests ----------------------------------------------------------------------

class CreateAgent(Request):
    """``POST /api/agents``: a ``moniker`` or a ``profile``; ``session_id`` makes it idempotent by id."""
    moniker: str | None = None
    profile: str | None = None
    name: str | None = None
    task: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    conversation_id: str | None = None
    parent_session_id: str | None = None
    config: dict | None = None


class Control(Request):
    session_id: str | None = None
    tree: bool | None = None


class Resume(Control):
    budget_tokens: int | None = None
    budget_cost: float | None = None


class Interrupt(Control):
    guidance: str


class Destroy(Request):
    session_id: str | None = None


class Approve(Request):
    args: dict[str, Any] | None = None


class Deny(Request):
    reason: str | None = None


class Answer(Request):
    text: str
    tool_call_id: str | None = None
    user_id: str | None = None


class Replay(Request):
    from_iteration: int | None = None
    to_iteration: int | None = None
    config: dict | None = None
    profile: str | None = None
    moniker: str | None = None
    tools: Literal["recorded", "live", "recorded_then_live"] | None = None
    children: Literal["served"] | None = None
    session_id: str | None = None


class CreateEvalSet(Request):
    name: str
    session_ids: list[str] | None = None
    search: dict | None = None
    from_iteration: int | None = None


class StartEvalRun(Request):
    scorers: list[str]
    config: dict | None = None
    profile: str | None = None
    moniker: str | None = None
    tools: Literal["recorded", "live", "recorded_then_live"] | None = None
    children: Literal["served"] | None = None
    to_iteration: int | None = None
    concurrency: int | None = None
    judge: dict | None = None


class PostMessage(Request):
    text: str
    user_id: str | None = None
    data: dict | None = None
    answers: bool | None = None


# ---- events of GET /api/stream -------------------------------------------------------

class StepDelta(Model):
    """A step's model output while it is generated (live only, never stored)."""
    agent_id: str
    session_id: str
    iteration: int
    conversation_id: str | None = None
    text: str | None = None
    final: bool | None = None
    attempt: int | None = None


class ActionRecord(Model):
    """A finished action as the stream carries it (fewer fields than ``GET /api/actions/<id>``)."""
    id: str
    type: str
    status: ActionStatus
    agent_id: str | None = None
    session_id: str | None = None
    conversation_id: str | None = None
    created_at: str | None = None
    processed_at: str | None = None
    error: str | None = None


class Event(Model):
    """One event of the stream.  ``event`` is its name, ``cursor`` the SSE id to
    resume after it (None for a live-only ``step_delta``), ``id`` the id of the
    row it describes, ``stream`` its series, ``data`` the row.  An event the
    client has no model for, or whose row does not fit its model, comes as this
    class with ``data`` as sent."""
    event: str
    cursor: str | None = None
    id: str | None = None
    stream: str | None = None
    data: Any = None
    payload: dict = Field(default_factory=dict, exclude=True, repr=False)  # {id, stream, data} as sent


class StepEvent(Event):
    event: Literal["agent_step"] = "agent_step"
    data: Step


class StepDeltaEvent(Event):
    event: Literal["step_delta"] = "step_delta"
    data: StepDelta


class AgentStateEvent(Event):
    event: Literal["agent_state"] = "agent_state"
    data: Snapshot


class ActionEvent(Event):
    event: Literal["action"] = "action"
    data: ActionRecord


class MessageEvent(Event):
    event: Literal["conversation_message"] = "conversation_message"
    data: Message


EVENTS: dict[str, type[Event]] = {"agent_step": StepEvent, "step_delta": StepDeltaEvent,
                                  "agent_state": AgentStateEvent, "action": ActionEvent,
                                  "conversation_message": MessageEvent}

# Each model and the component of the OpenAPI document it must agree with
# (tests/client_contract.py).  The stream is not in the document (api/routes/stream.py
# says why): its events' rows are the documented rows, checked here as Step, Snapshot, Message.
COMPONENTS: dict[type[BaseModel], str] = {
    Accepted: "Accepted", ToolCallAccepted: "ToolCallAccepted", AnswerAccepted: "AnswerAccepted",
    Action: "Action", Snapshot: "Snapshot", Step: "Step", AgentList: "AgentList", ToolCall: "ToolCall",
    WaitingItem: "WaitingItem", WaitingList: "WaitingList", Message: "Message", Delivery: "Delivery",
    Posted: "Posted", SessionDiff: "SessionDiff", EvalSet: "EvalSet", EvalSetList: "EvalSetList",
    EvalRun: "EvalRun", EvalRunDetail: "EvalRunDetail", EvalRunList: "EvalRunList", WhoAmI: "WhoAmI",
    CreateAgent: "CreateAgentRequest", Control: "TreeControlRequest", Resume: "ResumeRequest",
    Interrupt: "InterruptRequest", Destroy: "ControlRequest", Approve: "ApproveRequest", Deny: "DenyRequest",
    Answer: "AnswerRequest", Replay: "ReplayRequest", CreateEvalSet: "EvalSetRequest",
    StartEvalRun: "RunRequest", PostMessage: "PostMessageRequest",
}
