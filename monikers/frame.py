"""StepFrame-v1: the stable contract between the runner and a moniker.

The runner hands a moniker ``frame_in`` and gets ``frame_out`` back:

    frame_in  = {step, state, guidance?, tool_results, inbox}
    frame_out = {step, next_step, state, text?, data?, done, notes?, tool_calls}

v1 is a superset of v0 (``{step, state, guidance?}`` in, no ``tool_calls``
out): a v0 moniker ignores the new inputs and never asks for tools, and keeps
working unchanged.

- ``frame_out.tool_calls`` asks the runner to run tools.  The runner persists
  the step (with its calls), runs them, and calls the moniker again only when
  every call has ended; a step with tool calls is never the session's last.
- The next ``frame_in.tool_results`` holds one result per call, in call order,
  with ``status`` success | failed | denied | unknown (``unknown``: the worker
  died while the tool ran; check before repeating it).
- ``frame_in.inbox`` holds everything else that arrived between two steps
  (child results, notes from observers or the runner such as
  ``interrupted_step``, user guidance and messages), in priority order
  (runtime/base/inbox.py); user guidance is also joined into ``guidance`` for v0
  monikers.

``step``/``next_step`` are string tokens chosen by the moniker ("3",
"review/1"...); the runner's integer iteration is deliberately not part of the
contract.  ``state`` is the moniker's own JSON object, carried from one step to
the next and persisted by the runner.
"""
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from domain.statuses import TOOL_CALL_ENDED, ToolCallStatus

Json = dict[str, Any]

MAX_TOOL_CALLS = 32  # per step, whatever a session sets
DEFAULT_TOOL_CALLS = 4  # per step, unless llm.max_tool_calls says otherwise (a small model repeats a call up to the cap)
TOOL_RESULT_STATUSES = tuple(s.value for s in ToolCallStatus if s in TOOL_CALL_ENDED)  # a call ends in one


class ToolCall(BaseModel):
    """A tool the moniker asks the runner to run.  ``id`` is the moniker's own
    handle for the call (an LLM's tool-call id, say), echoed in its result."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = Field(None, min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=256)
    args: Json = Field(default_factory=dict)


class ToolResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    status: Literal["success", "failed", "denied", "unknown"]
    result: Any = None
    error: str | None = None
    # present only when a person changed the model's args before approving: what the call ran with
    args: dict[str, Any] | None = None

    @model_serializer(mode="wrap")
    def _args_only_when_edited(self, handler):
        """A result dumps as it did before ``args`` existed unless a person edited
        the call: the recorded inputs of every other step stay as they were."""
        dumped = handler(self)
        if dumped.get("args") is None:
            dumped.pop("args", None)
        return dumped


class InboxItem(BaseModel):
    """Something that arrived for the agent between two steps.  ``kind`` says
    what (runtime/base/inbox.py lists the kinds and their priorities): ``guidance``
    (a user's), ``interrupted_step`` (a note from the runner), ``child_result``,
    ``observer_note``, ``parent_context``... (an ``ask_user`` answer is a tool result)"""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=64)
    text: str | None = None
    data: Any = None
    source: Json | None = None


class FrameIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str = Field(max_length=256)
    state: Json = Field(default_factory=dict)
    guidance: str | None = None
    tool_results: list[ToolResult] = Field(default_factory=list)
    inbox: list[InboxItem] = Field(default_factory=list)


class FrameOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str = Field(max_length=256)
    next_step: str = Field(max_length=256)
    state: Json = Field(default_factory=dict)
    text: str | None = None
    data: Any = None
    done: bool = False
    notes: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list, max_length=MAX_TOOL_CALLS)


@dataclass(frozen=True)
class StepContext:
    """What a moniker may know about the session it is stepping, besides the frame.

    A moniker that calls a model reports each call with :meth:`record_usage`;
    the runner puts the calls on the step row and adds them to the session's
    running totals, also when the step then fails.  A call reported without
    ``rate_wait_ms`` did not pass the model-call gate (monikers/llm_gate.py):
    it is counted against its model's shared rate limit after the fact.

    ``tools`` describes the tools this session may call (its ``config.tools``,
    each as ``Tool.describe()``: name, description, args_schema...), for a
    moniker that shows them to a model; empty when it may call none.

    ``system_prompt`` is the agent's own instructions, rendered for this step
    from its profile's prompt segments (profiles/hooks.py); None without a
    profile.  A moniker that talks to a model sends it as the system message.

    ``deadline`` is the ``time.monotonic()`` at which the runner cancels the
    step (its ``step_timeout_s``): a moniker that calls a model bounds its
    requests by it, so the step ends with its own clear error first.
    ``on_output`` takes the model's output while it is generated (a dict:
    ``text`` so far, ``tokens``, ``attempt``, ``final``…) for the live view;
    :meth:`live_output` adds which call it belongs to.
    """

    task: str
    agent_id: str
    session_id: str
    iteration: int
    config: Json = field(default_factory=dict)
    usage_calls: list = field(default_factory=list)
    model_io: list = field(default_factory=list)
    tools: list = field(default_factory=list)
    system_prompt: str | None = None
    deadline: float | None = None
    on_output: Callable[[dict], None] | None = None

    def live_output(self, function: str, ask: int, info) -> Callable[[dict], None] | None:
        """A callback for one model call's live output (None when nobody listens)."""
        if self.on_output is None:
            return None
        on_output = self.on_output

        def live(delta: dict) -> None:
            on_output({**delta, "function": function, "ask": ask, "mode": info.mode})
        return live

    def record_call(self, entry: dict | None) -> None:
        """Report one model call given as :func:`monikers.llm_call.usage_entry` made it."""
        if entry:
            self.record_usage(**entry)

    def record_model_io(self, *, function: str, ask: int, request: dict | None, reply: str | None,
                        model: str | None = None, mode: str | None = None, tokens: dict | None = None) -> None:
        """Report what one model call sent (the request body, no headers) and
        got back: the runner keeps it for the session's last steps when the
        operator asks (runtime/record/model_io.py)."""
        self.model_io.append({"function": function, "ask": ask, "request": request, "reply": reply,
                              "model": model, "mode": mode, "tokens": tokens})

    def record_usage(self, *, model: str | None = None, input_tokens: int = 0, output_tokens: int = 0,
                     duration_ms: float = 0.0, cost: float | None = None, **extra) -> None:
        if "rate_wait_ms" not in extra:  # a call that did not pass the model-call gate (monikers/llm_gate.py)
            from monikers import llm_gate
            llm_gate.account(model, int(input_tokens or 0) + int(output_tokens or 0))
        self.usage_calls.append({"model": model, "input_tokens": int(input_tokens or 0),
                                 "output_tokens": int(output_tokens or 0),
                                 "duration_ms": float(duration_ms or 0.0), "cost": cost, **extra})


class StepError(Exception):
    """A step failed in a way the moniker understands.  ``raw_output`` (for
    example a model reply that would not parse) is kept on the error step row."""

    def __init__(self, message: str, raw_output: str | None = None):
        super().__init__(message)
        self.raw_output = raw_output


StepFn = Callable[[FrameIn, StepContext], Awaitable[FrameOut | Json]]


@dataclass(frozen=True)
class Moniker:
    """A named step function.  ``initial_step`` is the token of a session's first step.

    ``config_model`` is the pydantic model of the moniker's own session-config
    keys (``countdown``'s ``n``...), beside the runner's keys in
    ``domain.session_config.SessionConfig``; None for a moniker that declares none.

    ``repeat_limit`` is the session's ``repeat_limit`` when its config sets
    none: a model that says the same text that many times in a row is stuck
    (the ``baml`` moniker's is 3); None for a moniker whose steps may repeat.

    ``reuses_tool_results`` is the session's ``reuse_tool_results`` when its
    config sets none: a model that calls the same tool again with the same
    args is looping (issue 39), a script that does so means it.
    """

    name: str
    step: StepFn
    description: str = ""
    initial_step: str = "0"
    config_model: type[BaseModel] | None = None
    repeat_limit: int | None = None
    reuses_tool_results: bool = False

    def describe(self) -> Json:
        """What ``GET /api/monikers`` shows: ``config_schema`` is the JSON Schema of
        the moniker's own config keys, or None when it declares none (a plugin
        without ``config_model``: its keys are then passed through unchecked)."""
        schema = self.config_model.model_json_schema() if self.config_model is not None else None
        return {"name": self.name, "description": self.description, "initial_step": self.initial_step,
                "config_schema": schema}
