"""Per-session configuration and the payload of a create action.

Other config keys are handed to the moniker (``countdown`` reads ``n``,
``chaos`` reads ``fail_at`` and ``mode``); the keys below are the runner's.
app.py checks both kinds at create time (api/session_config.py): a key that is
neither the runner's nor in the moniker's ``config_model`` is refused there.
"""
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.json_schema import SkipJsonSchema

ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]

from domain.json_types import JsonInt, json_int


class RetryPolicy(BaseModel):
    """How often a failed step is tried again before it becomes an error step,
    per class of failure, with exponential backoff and full jitter."""

    model_config = ConfigDict(extra="forbid", strict=True)

    transient: JsonInt = Field(3, ge=0, le=20, description="errors marked transient, connection errors")
    timeout: JsonInt = Field(0, ge=0, le=20, description="steps that ran past step_timeout_s")
    invalid_output: JsonInt = Field(0, ge=0, le=20, description="frame_out that failed validation")
    error: JsonInt = Field(0, ge=0, le=20, description="any other exception")
    base_delay_s: float = Field(0.5, ge=0, le=600)
    max_delay_s: float = Field(30.0, ge=0, le=3600)


class InheritConfig(BaseModel):
    """What a sub-agent sees of its parent when it starts (runtime/session/child_sessions.py)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    transcript: JsonInt = Field(0, ge=0, le=200, description="the parent's last N step texts (and the messages "
                                                             "of its conversation), as a parent_context inbox item")


class SessionConfig(BaseModel):
    # strict: a JSON false or "5" is not a number (the API says so at create time)
    model_config = ConfigDict(extra="allow", strict=True)

    interval_s: float = Field(1.0, ge=0, le=86_400, description="pause between two steps")
    max_steps: json_int(ge=1, le=100_000_000) | None = Field(None, description="finish after this many steps")
    max_runtime_s: float | None = Field(None, gt=0, le=365 * 86_400, description="finish after this long")
    stop_on_done: bool = Field(True, description="finish when the moniker says done")
    step_timeout_s: float = Field(300.0, gt=0, le=86_400, description="a step running longer is an error")
    retries: RetryPolicy = Field(default_factory=RetryPolicy)
    repeat_limit: json_int(ge=2, le=10_000) | None = Field(None,
                                     description="stop when the same text comes out this many times in a row")
    budget_tokens: json_int(ge=1) | None = Field(None,
                                                 description="pause (reason budget) before tokens exceed this")
    budget_cost: float | None = Field(None, gt=0, description="pause (reason budget) before cost exceeds this")
    pause_expiry_s: float | None = Field(None, gt=0, description="stop when paused this long (default: service's)")
    tools: list[ToolName] = Field(default_factory=list, max_length=256,
                                  description="tools this session may call (StepFrame-v1 tool_calls); default none")
    approve: list[ToolName] = Field(default_factory=list, max_length=256,
                                    description="tools whose calls wait for a human's approval first")
    tool_concurrency: JsonInt = Field(4, ge=1, le=64, description="calls of one step running at once")
    reuse_tool_results: bool | None = Field(
        None, description="a call identical (name and args) to one that already succeeded in this session gets "
                          "that result instead of running again; tools whose repeat is the point (wait, "
                          "spawn_agent, ask_user...) always run. Default: the moniker's (on for baml, off for "
                          "scripted and plugins)")
    when_idle: Literal["continue", "wait"] = Field(
        "continue", description="after a step that calls no tool and is not done: keep stepping (continue), or end "
                                "the turn and wait (wait: status waiting, reason idle, until anything reaches the "
                                "inbox: a message, guidance, a child's result, an answer); a profile's flow rules "
                                "decide instead when they match")
    private: bool = Field(False, description="keep no record of what the model was sent and what it answered "
                                             "(a step's \"what the model saw\"); a sub-agent of a private "
                                             "session is private too")
    # sub-agents (spawn_agent / message_agent, runtime/session/child_sessions.py)
    inherit: InheritConfig | None = Field(None, description="a sub-agent's view of its parent at its first step")
    on_parent_destroy: Literal["destroy", "abandon"] = Field(
        "destroy", description="a sub-agent: destroyed with its parent (default), or left running")
    max_depth: JsonInt = Field(3, ge=0, le=32, description="how deep sub-agents of this session may nest")
    max_children: JsonInt = Field(20, ge=0, le=1000, description="sub-agents this session may spawn")
    # Not in the JSON schema: a create may not set it (the API refuses it); profiles/resolve.py does.
    profile: SkipJsonSchema[dict[str, Any] | None] = Field(
        None, description="set by the service when a session starts from a profile (name, hash, prompt, "
                          "observers, flow, inbox priorities); never by a create")


class CreatePayload(BaseModel):
    """What a create action carries besides its agent and session ids."""

    model_config = ConfigDict(extra="forbid")

    moniker: str = Field(min_length=1, max_length=128)
    name: str | None = Field(None, max_length=200)
    task: str = Field("", max_length=20_000)
    config: SessionConfig = Field(default_factory=SessionConfig)
    conversation_id: str | None = None
    # a sub-agent's create (spawn_agent, runtime/session/child_sessions.py; ask_user's tests too): plain creates leave them out
    parent_agent_id: str | None = Field(None, max_length=128)
    parent_session_id: str | None = Field(None, max_length=128)
    subagent: dict | None = None  # {depth, max_depth, wait_call, on_parent_destroy}
    inbox: list[dict] | None = Field(None, max_length=8)  # items for its first step (parent_context)


# ---- a sub-agent never has more than its parent ------------------------------------

# What picks where a session's model calls go and what they may cost: a child
# keeps its parent's (monikers/llm_settings.py reads them).
LLM_BOUND_KEYS = ("endpoint", "model", "base_url", "api_key_env")


class ExceedsParent(ValueError):
    """A sub-agent's config asks for more than its parent has; the message says what."""


def within_parent(parent: dict, child: dict) -> dict:
    """``child`` (a sub-agent's config) held inside ``parent`` (its parent
    session's config): its tools a subset of the parent's (else
    :class:`ExceedsParent`); every tool the parent must have approved is
    approved in the child too (added, not refused); and an ``llm.endpoint`` or
    ``llm.model`` it names must be the parent's (a child that names none gets the
    service's default, as any session does).  Depth, children and the tree's
    budget are bounded elsewhere (tools/spawn_agent.py, runtime/session/session_tree.py)."""
    child = dict(child)
    allowed = list(parent.get("tools") or [])
    extra = [t for t in child.get("tools") or [] if t not in allowed]
    if extra:
        raise ExceedsParent(f"tools {extra} are not among the parent's ({allowed or 'none'}): a sub-agent may "
                            "only use tools its parent may")
    tools = child.get("tools") or []
    approve = list(child.get("approve") or [])
    approve += [t for t in parent.get("approve") or [] if t in tools and t not in approve]
    child["approve"] = approve
    if parent.get("private"):
        child["private"] = True  # what a private session's model saw stays unkept in its tree too
    parent_llm = parent.get("llm") if isinstance(parent.get("llm"), dict) else {}
    child_llm = child.get("llm") if isinstance(child.get("llm"), dict) else {}
    for key in LLM_BOUND_KEYS:
        if child_llm.get(key) is not None and child_llm[key] != parent_llm.get(key):
            raise ExceedsParent(f"llm.{key} {child_llm[key]!r} is not the parent's "
                                f"({parent_llm.get(key) or 'the service default'}): a sub-agent's model calls "
                                "go where its parent's go")
    return child
