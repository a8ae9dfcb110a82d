"""Per-session configuration and the payload of a create action.

Unknown config keys are allowed and handed to the moniker (``countdown`` reads
``n``, ``chaos`` reads ``fail_at`` and ``mode``); the keys below are the runner's.
"""
from pydantic import BaseModel, ConfigDict, Field


class SessionConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    interval_s: float = Field(1.0, ge=0, le=86_400, description="pause between two steps")
    max_steps: int | None = Field(None, ge=1, le=100_000_000, description="finish after this many steps")
    max_runtime_s: float | None = Field(None, gt=0, le=365 * 86_400, description="finish after this long")
    stop_on_done: bool = Field(True, description="finish when the moniker says done")
    step_timeout_s: float = Field(300.0, gt=0, le=86_400, description="a step running longer is an error")


class CreatePayload(BaseModel):
    """What a create action carries besides its agent and session ids."""

    model_config = ConfigDict(extra="forbid")

    moniker: str = Field(min_length=1, max_length=128)
    task: str = Field("", max_length=20_000)
    config: SessionConfig = Field(default_factory=SessionConfig)
    conversation_id: str | None = None
