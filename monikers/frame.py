"""StepFrame-v0: the stable contract between the runner and a moniker.

The runner hands a moniker ``frame_in`` and gets ``frame_out`` back:

    frame_in  = {step, state, guidance?}
    frame_out = {step, next_step, state, text?, data?, done, notes?}

``step``/``next_step`` are string tokens chosen by the moniker ("3",
"review/1"...); the runner's integer iteration is deliberately not part of the
contract.  ``state`` is the moniker's own JSON object, carried from one step to
the next and persisted by the runner.
"""
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field

Json = dict[str, Any]


class FrameIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str = Field(max_length=256)
    state: Json = Field(default_factory=dict)
    guidance: str | None = None


class FrameOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str = Field(max_length=256)
    next_step: str = Field(max_length=256)
    state: Json = Field(default_factory=dict)
    text: str | None = None
    data: Any = None
    done: bool = False
    notes: str | None = None


@dataclass(frozen=True)
class StepContext:
    """What a moniker may know about the session it is stepping, besides the frame."""

    task: str
    agent_id: str
    session_id: str
    iteration: int
    config: Json = field(default_factory=dict)


StepFn = Callable[[FrameIn, StepContext], Awaitable[FrameOut | Json]]


@dataclass(frozen=True)
class Moniker:
    """A named step function.  ``initial_step`` is the token of a session's first step."""

    name: str
    step: StepFn
    description: str = ""
    initial_step: str = "0"

    def describe(self) -> Json:
        return {"name": self.name, "description": self.description, "initial_step": self.initial_step}
