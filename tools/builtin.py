"""Built-in tools, each safe to offer by default (a session may call only the
tools its config lists in ``tools``).

- ``wait``: a durable timer.  The session sleeps until a time (``seconds`` from
  when the call was made, or an ISO-8601 ``until``) and wakes after restarts:
  the deadline is computed from the call's creation time, and the tool is
  idempotent, so a worker that dies mid-wait runs it again to the same deadline.
- ``human``: an *external* tool: nothing runs; the call waits until someone
  posts its result (``POST /api/tool-calls/<id>/result``).
- ``ask_user``: ask the user and wait for the answer (tools/ask_user.py).

Tools that exist only to test crashes and limits are not here: they are the
tests' plugins (tests/plugins.py), registered only where the tests ask.
"""
import asyncio
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.ask_user import ASK_USER
from tools.tool import Tool, ToolContext

MAX_WAIT_S = 30 * 86_400


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- wait -------------------------------------------------------------------

def _exactly_one_of(schema: dict) -> None:
    """The args schema says what the validator below says: exactly one of
    ``seconds`` and ``until``, as two closed objects.  With two optional
    properties a grammar built from the schema (llama.cpp's) allows ``{}`` and
    both at once, and SmolLM2-135M wrote 10-16 such invalid calls a run."""
    props = schema.pop("properties")
    schema.pop("additionalProperties", None)
    schema.pop("type", None)
    schema["anyOf"] = [{"type": "object", "properties": {name: {k: v for k, v in props[name]["anyOf"][0].items()}
                                                         | {"description": props[name]["description"]}},
                        "required": [name], "additionalProperties": False} for name in ("seconds", "until")]


class WaitArgs(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_exactly_one_of)

    seconds: float | None = Field(None, ge=0, le=MAX_WAIT_S, description="how long from when the call was made")
    until: datetime | None = Field(None, description="ISO-8601 time to wake at (UTC if no zone)")

    @model_validator(mode="after")
    def _one(self) -> "WaitArgs":
        if (self.seconds is None) == (self.until is None):
            raise ValueError("give exactly one of seconds or until")
        return self


def wake_time(args: WaitArgs, made_at: datetime | None) -> datetime:
    if args.until is not None:
        until = args.until if args.until.tzinfo else args.until.replace(tzinfo=timezone.utc)
        return until
    return (made_at or datetime.now(timezone.utc)) + timedelta(seconds=args.seconds)


async def wait_run(args: WaitArgs, ctx: ToolContext) -> dict:
    wake = wake_time(args, ctx.created_at)
    remaining = (wake - datetime.now(timezone.utc)).total_seconds()
    if remaining > MAX_WAIT_S:
        raise ValueError(f"cannot wait more than {MAX_WAIT_S} s")
    if remaining > 0:
        await asyncio.sleep(remaining)
    return {"woke_at": datetime.now(timezone.utc).isoformat(), "until": wake.isoformat()}


WAIT = Tool("wait", "Sleep until a time (seconds from now, or an ISO-8601 'until'); survives restarts.",
            wait_run, WaitArgs, timeout_s=MAX_WAIT_S + 60, idempotent=True, reusable=False)


# ---- human (external) -------------------------------------------------------

class HumanArgs(Strict):
    question: str = Field(min_length=1, max_length=4000)


HUMAN = Tool("human", "Ask a human (or another system); the answer is posted to "
             "POST /api/tool-calls/<id>/result and the session waits for it.", None, HumanArgs, external=True)


BUILTINS = (WAIT, HUMAN, ASK_USER)
