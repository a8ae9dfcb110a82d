"""Request and response models of the HTTP API.

Requests are validated with these models before anything touches the store;
responses are described by them in the OpenAPI document.  Every string has a
length cap and every id a strict pattern (the same one ``store/`` enforces).
"""
from domain.statuses import ActionStatus, SessionStatus, StepStatus
import json
import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints, field_validator, model_validator

from domain.session_config import SessionConfig
from store.filters import ID_PATTERN
from store.step_filters import ATTEMPT_OUTCOMES, ONLY as STEP_FILTERS

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN.pattern)]
# RFC 3339 date-time (what the document's "format: date-time" means): seconds and an offset required
ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")
EARLIEST = datetime(1000, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
MAX_CONFIG_BYTES = 262_144  # a create's config as JSON (scripted frames can be long); bodies cap at 1 MiB
MAX_TEXT = 20_000



# "Not blank" as the OpenAPI document states it (``pattern: \S``, with
# ECMAScript's \s, as clients and schemathesis read it), checked here with the
# same characters: Python's str.strip() also strips \x1c-\x1f and \x85, and
# pydantic's own regex uses Unicode's White_Space, so neither agrees with it.
ECMA_SPACE = frozenset("\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff"
                       + "".join(chr(c) for c in range(0x2000, 0x200B)))
NOT_BLANK = {"pattern": r"\S"}  # json_schema_extra of a text field that must not be blank


def not_blank(value: str, what: str) -> str:
    if all(c in ECMA_SPACE for c in value):
        raise ValueError(f"{what} must not be blank")
    return value

class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmptyRequest(Strict):
    """A body with nothing in it: absent, or ``{}``."""


# no control characters, no leading or trailing space
Name = Annotated[str, StringConstraints(min_length=1, max_length=200,
                                        pattern=r"^[^\s\x00-\x1f\x7f]([^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$")]


class CreateAgentRequest(Strict):
    moniker: str | None = Field(None, min_length=1, max_length=128, description="one of GET /api/monikers")
    profile: str | None = Field(None, min_length=1, max_length=64,
                                description="or: one of GET /api/profiles (its moniker, prompt, tools, limits...; "
                                            "config then overrides only what the profile allows)")
    name: Name | None = Field(None, description="a name for people; shown instead of the id where there is room")
    task: str = Field("", max_length=MAX_TEXT)
    agent_id: Id | None = None
    session_id: Id | None = Field(None, description="client-supplied id makes the create idempotent")
    conversation_id: Id | None = None
    parent_session_id: Id | None = Field(None, description="make it a child of this existing session "
                                                          "(404 if there is none)")
    config: SessionConfig = Field(default_factory=SessionConfig)

    @model_validator(mode="after")
    def _moniker_or_profile(self) -> "CreateAgentRequest":
        if (self.moniker is None) == (self.profile is None):
            raise ValueError("give exactly one of moniker or profile")
        if self.config.profile is not None:
            raise ValueError("config.profile is set from a profile, never by a create")
        return self

    @field_validator("config")
    @classmethod
    def _config_size(cls, config: SessionConfig) -> SessionConfig:
        if len(json.dumps(config.model_dump(), default=str)) > MAX_CONFIG_BYTES:
            raise ValueError(f"config must serialise to at most {MAX_CONFIG_BYTES} bytes")
        return config


class ControlRequest(Strict):
    session_id: Id | None = Field(None, description="default: the agent's latest session")


class TreeControlRequest(ControlRequest):
    tree: StrictBool = Field(False, description="also every sub-agent below the session")


class ResumeRequest(TreeControlRequest):
    budget_tokens: int | None = Field(None, ge=1, le=10**15, description="raise the session's token budget")
    budget_cost: float | None = Field(None, gt=0, le=10**12, description="raise the session's cost budget")


class InterruptRequest(TreeControlRequest):
    guidance: str = Field(min_length=1, max_length=MAX_TEXT, json_schema_extra=NOT_BLANK)

    @field_validator("guidance")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return not_blank(value, "guidance")


class Page(Strict):
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=1_000_000)


AGENT_STATUSES = tuple(SessionStatus)
AGENT_SORTS = ("newest", "oldest", "updated", "name")


class AgentQuery(Page):
    status: Literal[AGENT_STATUSES] | None = Field(None, description="the latest session's status")
    moniker: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$",
                                description="only agents whose latest session runs this moniker")
    q: str | None = Field(None, min_length=1, max_length=200,
                          description="text in the name, task, agent_id or session_id (case-insensitive)")
    sort: Literal[AGENT_SORTS] = Field("newest", description="newest/oldest by creation, updated = most "
                                                             "recently changed first, name = by name (then id)")


class ActionQuery(Page):
    session_id: Id | None = None
    agent_id: Id | None = None
    type: Literal["create", "pause", "resume", "interrupt", "destroy", "answer"] | None = None
    status: Literal[tuple(ActionStatus)] | None = None
    order: Literal["newest", "oldest"] = Field("newest", description="by acceptance time")


class StepQuery(Page):
    session_id: Id | None = None
    agent_id: Id | None = None
    min_iteration: int | None = Field(None, ge=0, le=2**62)
    max_iteration: int | None = Field(None, ge=0, le=2**62)
    since: datetime | None = Field(None, description="ISO-8601; steps created at or after it")
    status: Literal[tuple(StepStatus)] | None = None
    only: Literal[STEP_FILTERS] | None = Field(
        None, description="keep only these steps: errors (status error), tool_calls (it asked for tool calls), "
                          "interrupted (cut off when its worker died), guided (it was handed a person's guidance "
                          "or conversation message); the answer then says how many match (matched)")
    attempt_outcome: Literal[ATTEMPT_OUTCOMES] | None = Field(
        None, description="keep only steps with at least one model-call HTTP attempt that ended so "
                          "(usage.calls[].attempts[].outcome); with only, both must hold")
    # desc without session_id sorts what matches, newest iteration first (a 400 there
    # would be a constraint the OpenAPI document cannot state, which schemathesis flags)
    order: Literal["asc", "desc"] = Field("asc", description="by iteration; desc = newest first (with "
                                                              "session_id: 404 if the session is unknown)")

    @field_validator("since", mode="before")
    @classmethod
    def _since_is_iso(cls, value):
        return since_is_iso(value)

    @field_validator("since")
    @classmethod
    def _since_in_range(cls, value: datetime | None) -> datetime | None:
        """Clamped to the years 1000-9999 in UTC: the store writes timestamps as
        %Y, which is not zero-padded below 1000, and converting an edge date to
        UTC can overflow.  No step is older or newer, so the answer is the same."""
        return clamp_to_calendar(value)


def since_is_iso(value):
    """Only an RFC 3339 date-time, as documented (pydantic alone would also
    take a number as a Unix time)."""
    if value is not None and (not isinstance(value, str) or not ISO_DATETIME.fullmatch(value)):
        raise ValueError("since must be an RFC 3339 date-time with an offset, e.g. 2026-01-31T12:00:00Z")
    return value


def clamp_to_calendar(value: datetime | None) -> datetime | None:
    """A filter's date in UTC, clamped to the years 1000-9999 the store can compare with."""
    if value is None:
        return value
    try:
        utc = value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
    except OverflowError:
        utc = EARLIEST if value.year < 5000 else LATEST
    return min(max(utc, EARLIEST), LATEST)


class CreateConversationRequest(Strict):
    title: str = Field("", max_length=500)
    created_by: Id | None = None
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(default_factory=list,
                                                                                       max_length=32)
    conversation_id: Id | None = Field(None, description="client-supplied id makes the create idempotent")


class JoinRequest(Strict):
    """One shape per kind; the document says so with oneOf."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": [
        {"properties": {"kind": {"const": "user"}, "user_id": {"type": "string"}}, "required": ["kind", "user_id"]},
        {"properties": {"kind": {"const": "agent"}, "session_id": {"type": "string"}},
         "required": ["kind", "session_id"]},
    ]})

    kind: Literal["user", "agent"]
    user_id: Id | None = Field(None, description="for kind=user")
    agent_id: Id | None = Field(None, description="for kind=agent; default: the session's agent")
    session_id: Id | None = Field(None, description="for kind=agent")
    role: str | None = Field(None, max_length=64)

    @model_validator(mode="after")
    def _subject(self) -> "JoinRequest":
        if self.kind == "user" and not self.user_id:
            raise ValueError("a user participant needs user_id")
        if self.kind == "agent" and not self.session_id:
            raise ValueError("an agent participant needs session_id")
        return self


class PostMessageRequest(Strict):
    text: str = Field(min_length=1, max_length=MAX_TEXT, json_schema_extra=NOT_BLANK)
    user_id: Id | None = Field(None, description="who posts; default 'user'")
    data: dict | None = None
    answers: bool = Field(True, strict=True,
                          description="false: a plain message (guidance) even while a question is open here, as the "
                                      "dashboard's message box posts; true: it answers the open question "
                                      "data.tool_call_id names, else the oldest")

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return not_blank(value, "text")

    @field_validator("data")
    @classmethod
    def _data_size(cls, data: dict | None) -> dict | None:
        if data is not None and len(json.dumps(data, default=str)) > MAX_CONFIG_BYTES:
            raise ValueError(f"data must serialise to at most {MAX_CONFIG_BYTES} bytes")
        return data


class MessageQuery(Strict):
    after: Id | None = Field(None, description="a message_id: only messages after it (exclusive)")
    limit: int = Field(100, ge=1, le=1000)


# ---- responses (documentation of shapes; rows carry more fields) ------------

class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Accepted(Open):
    agent_id: str
    session_id: str
    action_id: str | None = Field(description="null only for a repeated create whose action row is gone")
    status: str


class Action(Open):
    id: str
    type: str
    status: Literal[tuple(ActionStatus)]
    agent_id: str | None = None
    session_id: str | None = None
    created_at: str
    processed_at: str | None = None
    error: str | None = None
    attempts: int
    actor: str | None = Field(None, description="the name of the token whose request queued it (null: the "
                                                "service itself, or a service without tokens)")


class Snapshot(Open):
    agent_id: str
    session_id: str
    name: str | None = None
    moniker: str
    status: str = Field(description="pending, running, paused, stopping, stopped, done or error")
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
    parent_agent_id: str | None = Field(None, description="a sub-agent's parent (GET …/children lists the other way)")
    parent_session_id: str | None = None
    parent_name: str | None = Field(None, description="a sub-agent's parent's name (GET /api/agents only; null "
                                                      "when the parent has none)")
    root_session_id: str | None = Field(None, description="a sub-agent's tree root")


class Step(Open):
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


class AgentList(Open):
    agents: list[Snapshot]
    total: int = Field(description="agents matching the filters (all pages)")
    counts: dict[str, int] = Field(description="agents per status, over the moniker and text filters")
    limit: int
    offset: int


class ActionList(Open):
    actions: list[Action]
    limit: int
    offset: int


class SessionList(Open):
    sessions: list[Snapshot]
    limit: int
    offset: int


class StepList(Open):
    steps: list[Step]
    limit: int
    offset: int
    matched: int | None = Field(None, description="with only or attempt_outcome: how many steps match in all")


class MonikerInfo(Open):
    name: str
    description: str
    initial_step: str
    config_schema: dict | None = Field(description="JSON Schema of the moniker's own config keys; null when "
                                                   "it declares none (its keys are then not checked)")


class MonikerList(Open):
    monikers: list[MonikerInfo]
    session_config_schema: dict = Field(description="JSON Schema of the keys every session accepts")


class EndpointInfo(Open):
    name: str = Field(description="what config.llm.endpoint names")
    models: list[str] | Literal["*"] = Field(description="the models config.llm.model may name; \"*\": any")
    default_model: str = Field(description="the model of a config that names none")
    structured: str = Field(description="its sessions' default llm.structured")
    chat_template_warning: str | None = Field(None, description="present when a llama.cpp endpoint's model has no "
                                                              "chat template of its own (replies will be poor)")


class EndpointList(Open):
    endpoints: list[EndpointInfo]


class TableShape(Open):
    fragments: int
    versions: int
    rows: int
    bytes: int


class StorageReport(Open):
    status: Literal["ok", "behind"]
    warnings: list[str]
    tables: dict[str, TableShape]
    maintenance: dict[str, dict] = Field(description="per live worker, per table: its last maintenance runs")
    lance_cache_bytes: int
    age_s: float = Field(description="how old this report is (rebuilt in the background every few seconds)")


class Health(Open):
    status: Literal["ok", "error"]
    pending_actions: int | None = None
    oldest_pending_age_s: float | None = None
    storage: StorageReport | None = Field(None, description="null until app.py's first report is built")


class WhoAmI(Open):
    auth: bool = Field(description="false when the service has no tokens (everyone may do everything)")
    name: str | None = Field(description="the token's name: recorded as the actor of the actions it queues")
    role: Literal["viewer", "operator", "admin"]


class Readiness(Open):
    status: Literal["ready", "not_ready"]
    reason: str | None = Field(None, description="why it is not ready")
    workers_polling: int = Field(description="agents.py workers whose fresh heartbeat says they poll the queue")
    workers_alive: int = Field(description="workers with a fresh heartbeat: polling, or adopting sessions after "
                                           "a start")
    heartbeat_age_s: float | None = Field(None, description="the freshest heartbeat's age, in seconds")


class Conversation(Open):
    conversation_id: str
    title: str | None = None
    created_by: str | None = None
    status: str
    tags: Any = None
    created_at: str


class ConversationList(Open):
    conversations: list[Conversation]
    limit: int
    offset: int


class Participant(Open):
    id: str
    conversation_id: str
    kind: Literal["user", "agent"]
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    role: str | None = None
    joined_at: str
    left_at: str | None = None
    name: str | None = Field(None, description="an agent participant's session name (null when it has none)")


class ParticipantList(Open):
    participants: list[Participant]
    limit: int
    offset: int


class Message(Open):
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
    name: str | None = Field(None, description="in GET …/messages, an agent sender's session name")


class MessageList(Open):
    messages: list[Message]
    limit: int
    after: str | None = None


class Delivery(Open):
    agent_id: str
    session_id: str
    action_id: str


class Posted(Open):
    message: Message
    deliveries: list[Delivery]
    answer: dict | None = Field(None, description="when the message answered an open question: the answer "
                                                  "action {agent_id, session_id, action_id, status, tool_call_id}; "
                                                  "then no agent gets it as guidance")


class ErrorBody(Strict):
    code: str
    message: str


class Error(Strict):
    error: ErrorBody
