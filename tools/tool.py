"""What a tool is: a named action an agent may ask the runner to take, the
context a running tool sees, and what a tool returns when its result comes later.

A tool is what a moniker may ask the runner to do for it (``frame_out.tool_calls``).
The runner, not the moniker, runs it, so every call is a durable row that
survives crashes (runtime/session/tool_runner.py runs them); tools/tool_registry.py finds them by name.
"""
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Awaitable, Callable

from pydantic import BaseModel


@dataclass(frozen=True)
class ToolContext:
    """What a running tool may know about the call that started it."""

    tool_call_id: str
    agent_id: str
    session_id: str
    iteration: int
    config: dict = field(default_factory=dict)
    attempt: int = 1
    created_at: datetime | None = None  # when the call was made (stable across re-runs after a crash)


ToolFn = Callable[[BaseModel, ToolContext], Awaitable[Any]]


@dataclass(frozen=True)
class Deferred:
    """What a tool returns when its work has started but its result comes later
    (``spawn_agent {wait: true}``: the sub-agent's outcome).  The call is then
    ``waiting_result``, with ``partial`` (e.g. the ids it started) on its row,
    until the result is delivered to it; the session takes no step meanwhile."""

    partial: Any = None


@dataclass(frozen=True)
class Tool:
    """A named action an agent may take.

    ``args_model`` validates the call's args (and gives ``GET /api/tools`` its
    JSON schema); a tool whose schema comes from elsewhere (an MCP server) sets
    ``args_schema`` instead and validates in ``run``.  ``run`` is None for an
    ``external`` tool, whose result is posted from outside (a human, another
    system); ``waits_for`` is the session's ``status_reason`` while such a
    call waits (``user`` for ``ask_user``).  ``idempotent`` tools may run again after a crash left their
    outcome unknown; others never are.  ``reusable``: in a session that reuses
    tool results, an identical earlier success may stand for a new call;
    False for a tool whose repeat is the point (``wait``, ``spawn_agent``).
    ``precheck(args)``: a reason the call cannot succeed, known from its args
    alone (``http_fetch``: a host the operator's allowlist refuses), or None;
    such a call ends ``failed`` when it is planned, never waiting for a
    person's approval that could only lead to the same refusal.
    """

    name: str
    description: str
    run: ToolFn | None
    args_model: type[BaseModel] | None = None
    args_schema: dict | None = None
    timeout_s: float = 60.0
    idempotent: bool = False
    needs_approval: bool = False
    external: bool = False
    waits_for: str = "tool_result"  # an external call's waiting reason: "user" for a human's answer
    reusable: bool = True
    precheck: Callable[[dict], str | None] | None = None

    def schema(self) -> dict:
        if self.args_model is not None:
            return self.args_model.model_json_schema()
        return self.args_schema or {"type": "object"}

    def describe(self) -> dict:
        return {"name": self.name, "description": self.description, "args_schema": self.schema(),
                "timeout_s": self.timeout_s, "idempotent": self.idempotent,
                "needs_approval": self.needs_approval, "external": self.external}
