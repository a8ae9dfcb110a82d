"""What a profile file may say, as pydantic models (``extra="forbid"`` everywhere,
so a misspelt key is an error naming its field, never silently ignored).

A profile is a YAML file in the service's profiles directory; see
docs/profiles.md for the format with examples.  The models here are the whole
of the format: the loader (profiles/loader.py) parses YAML into them, and
profiles/resolve.py turns a valid profile into a session's config.
"""
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from monikers.llm_settings import LLMConfig
from profiles.template import check_template

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
RESERVED_NAMES = frozenset({"reload"})  # POST /api/profiles/reload
ProfileName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")]
Kind = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
MAX_TEXT = 20_000


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- prompt ---------------------------------------------------------------

class Segment(Strict):
    """One piece of the system prompt: static ``text``, or a ``template`` whose
    ``{{ field }}`` placeholders are filled at each step (profiles/template.py)."""

    text: str | None = Field(None, max_length=MAX_TEXT)
    template: str | None = Field(None, max_length=MAX_TEXT)

    @model_validator(mode="after")
    def _one(self) -> "Segment":
        if (self.text is None) == (self.template is None):
            raise ValueError("a segment has exactly one of text or template")
        if self.template is not None:
            check_template(self.template)
        return self


# ---- tools, limits --------------------------------------------------------

class Tools(Strict):
    allowed: list[ToolName] = Field(default_factory=list, max_length=256)
    approve: list[ToolName] = Field(default_factory=list, max_length=256,
                                    description="calls of these wait for a human's approval")

    @model_validator(mode="after")
    def _approve_is_allowed(self) -> "Tools":
        extra = [t for t in self.approve if t not in self.allowed]
        if extra:
            raise ValueError(f"approve names tools that are not allowed: {extra}")
        return self


class Limits(Strict):
    max_steps: int | None = Field(None, ge=1, le=100_000_000)
    max_runtime_s: float | None = Field(None, gt=0, le=365 * 86_400)
    step_timeout_s: float | None = Field(None, gt=0, le=86_400)
    repeat_limit: int | None = Field(None, ge=2, le=10_000)
    budget_tokens: int | None = Field(None, ge=1)
    budget_cost: float | None = Field(None, gt=0)
    tool_concurrency: int | None = Field(None, ge=1, le=64)


# ---- observers and flow ---------------------------------------------------

class Condition(Strict):
    """A fixed set of safe predicates (profiles/conditions.py), all of the given
    ones must hold; ``all``/``any``/``not`` combine conditions.  No expression
    is ever evaluated as code."""

    always: bool | None = None
    iteration_at_least: int | None = Field(None, ge=0, description="the runner's 0-based iteration")
    no_tool_calls_for: int | None = Field(None, ge=1, le=1000, description="this many steps in a row without "
                                                                           "tool calls (post: this one included)")
    has_tool_calls: bool | None = None
    called_tool: ToolName | None = None
    done: bool | None = None
    text_has_question: bool | None = Field(None, description="the step's text asks something (a sentence "
                                                             "ending in '?')")
    text_contains: str | None = Field(None, min_length=1, max_length=500, description="case-insensitive")
    text_matches: str | None = Field(None, min_length=1, max_length=500, description="a regular expression")
    inbox_has: Kind | None = Field(None, description="an item of this kind waits in the inbox")
    state_has: str | None = Field(None, min_length=1, max_length=200, description="a key of the state")
    tokens_over: int | None = Field(None, ge=0, description="the session's tokens so far")
    cost_over: float | None = Field(None, ge=0)
    all: list["Condition"] | None = Field(None, max_length=32)
    any: list["Condition"] | None = Field(None, max_length=32)
    not_: "Condition | None" = Field(None, alias="not")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("text_matches")
    @classmethod
    def _regex(cls, value):
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _something(self) -> "Condition":
        if not self.model_fields_set:
            raise ValueError("an empty condition; use {always: true}")
        return self


class ObserverAction(Strict):
    """Exactly one of: ``note`` (an inbox item of kind observer_note, templated),
    ``pause``, ``stop`` (a reason), ``ask_user`` (the question, or true to use the step's text)."""

    note: str | None = Field(None, min_length=1, max_length=MAX_TEXT)
    pause: str | None = Field(None, min_length=1, max_length=500)
    stop: str | None = Field(None, min_length=1, max_length=500)
    ask_user: str | bool | None = None

    @model_validator(mode="after")
    def _one(self) -> "ObserverAction":
        given = [k for k in ("note", "pause", "stop", "ask_user") if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError("an action has exactly one of note, pause, stop or ask_user")
        if self.note is not None:
            check_template(self.note)
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("note", "pause", "stop", "ask_user") if getattr(self, k) not in (None, False))


class Observer(Strict):
    """Runs before or after each step: when ``if`` holds, ``then`` happens.  Or
    ``python``: an observer installed under the ``agentsvc.observers`` entry-point
    group, called with ``with`` as its arguments."""

    name: Kind
    when: Literal["before_step", "after_step"]
    if_: Condition | None = Field(None, alias="if")
    then: ObserverAction | None = None
    python: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    with_: dict[str, Any] = Field(default_factory=dict, alias="with")
    once: bool = Field(False, description="fire at most once per session (not again after it fired, "
                                          "also after a restart)")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _shape(self) -> "Observer":
        if self.python is None and (self.if_ is None or self.then is None):
            raise ValueError("an observer needs `if` and `then` (or `python`)")
        if self.python is not None and (self.if_ is not None or self.then is not None):
            raise ValueError("a python observer takes `with`, not `if`/`then`")
        return self


class FlowRule(Strict):
    """When a step returns neither tool calls nor done: the first rule whose
    ``if`` holds (no ``if``: always) says what happens next."""

    if_: Condition | None = Field(None, alias="if")
    then: Literal["continue", "wait_user", "end_turn"]

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# ---- the profile ----------------------------------------------------------

OVERRIDABLE_DEFAULT = ("interval_s", "max_steps", "max_runtime_s", "step_timeout_s", "repeat_limit",
                       "budget_tokens", "budget_cost", "stop_on_done", "retries", "tool_concurrency",
                       "pause_expiry_s", "tools", "approve")
OVERRIDABLE_KEYS = frozenset({*OVERRIDABLE_DEFAULT, "llm"})


class Profile(Strict):
    name: ProfileName
    description: str = Field("", max_length=2000)
    moniker: str = Field(min_length=1, max_length=128)
    llm: LLMConfig | None = Field(None, description="becomes the session's config.llm, so it is checked by the "
                                                   "same model: an endpoint by name (the operator's endpoints "
                                                   "file), never a URL or a key")
    prompt: list[Segment] = Field(default_factory=list, max_length=64)
    tools: Tools = Field(default_factory=Tools)
    limits: Limits = Field(default_factory=Limits)
    interval_s: float | None = Field(None, ge=0, le=86_400)
    stop_on_done: bool | None = None
    inbox_priorities: dict[Kind, int] = Field(default_factory=dict, max_length=64)
    observers: list[Observer] = Field(default_factory=list, max_length=32)
    flow: list[FlowRule] = Field(default_factory=list, max_length=32)
    config: dict[str, Any] = Field(default_factory=dict, description="the moniker's own config keys")
    overridable: list[Literal[tuple(sorted(OVERRIDABLE_KEYS))]] = Field(
        default_factory=lambda: list(OVERRIDABLE_DEFAULT),
        description="session config keys a create may override (tools only narrowed, approve only widened)")

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name):
        if name in RESERVED_NAMES:
            raise ValueError(f"{name!r} is reserved (POST /api/profiles/{name})")
        return name

    @field_validator("observers")
    @classmethod
    def _unique_observers(cls, observers):
        names = [o.name for o in observers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"observer names must be unique: {dupes}")
        return observers

    @field_validator("config")
    @classmethod
    def _no_runner_keys(cls, config):
        reserved = {"profile", "tools", "approve", "llm", "interval_s"} & set(config)
        if reserved:
            raise ValueError(f"{sorted(reserved)} belong in the profile's own fields, not config")
        return config
