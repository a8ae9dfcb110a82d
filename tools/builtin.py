"""Built-in tools, each safe to offer by default (a session may call only the
tools its config lists in ``tools``).

- ``wait``: a durable timer.  The session sleeps until a time (``seconds`` from
  when the call was made, or an ISO-8601 ``until``) and wakes after restarts:
  the deadline is computed from the call's creation time, and the tool is
  idempotent, so a worker that dies mid-wait runs it again to the same deadline.
- ``human``: an *external* tool: nothing runs; the call waits until someone
  posts its result (``POST /api/tool-calls/<id>/result``).

Deterministic tools for tests (in the spirit of the ``chaos``/``sleepy`` monikers):

- ``add``: adds numbers.
- ``sleep_count`` / ``sleep_count_idempotent``: sleep ``seconds``, after
  appending one line to ``<AGENTSVC_TOOL_COUNT_DIR>/<key>.count`` (fsynced),
  so a test can prove how many times a call's tool really started, across
  kill -9.  The directory is the operator's (environment of agents.py); a call
  only names a key matching ``[A-Za-z0-9_-]{1,64}``.  Without the variable set
  the tools fail with a message saying so.
- ``repeat``: ``text`` repeated ``times`` times (a result over the cap, on purpose).
- ``fail``: fails on purpose with ``message``.
"""
import asyncio
import os
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.ask_user import ASK_USER
from tools.tool import Tool, ToolContext

COUNT_DIR_ENV = "AGENTSVC_TOOL_COUNT_DIR"
MAX_WAIT_S = 30 * 86_400


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- wait -------------------------------------------------------------------

class WaitArgs(Strict):
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
            wait_run, WaitArgs, timeout_s=MAX_WAIT_S + 60, idempotent=True)


# ---- human (external) -------------------------------------------------------

class HumanArgs(Strict):
    question: str = Field(min_length=1, max_length=4000)


HUMAN = Tool("human", "Ask a human (or another system); the answer is posted to "
             "POST /api/tool-calls/<id>/result and the session waits for it.", None, HumanArgs, external=True)


# ---- deterministic test tools ----------------------------------------------

class AddArgs(Strict):
    numbers: list[float] = Field(min_length=1, max_length=1000)


async def add_run(args: AddArgs, ctx: ToolContext) -> dict:
    total = sum(args.numbers)
    return {"sum": int(total) if total.is_integer() else total}


class SleepCountArgs(Strict):
    seconds: float = Field(0.0, ge=0, le=600)
    key: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="name of the counter file")


def count_file(key: str) -> str:
    directory = os.environ.get(COUNT_DIR_ENV)
    if not directory:
        raise RuntimeError(f"sleep_count needs the operator to set {COUNT_DIR_ENV} for agents.py")
    return os.path.join(directory, f"{key}.count")


def read_count(directory: str, key: str) -> int:
    """How many times the tool started for ``key`` (for tests)."""
    try:
        with open(os.path.join(directory, f"{key}.count")) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _append_line(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


async def sleep_count_run(args: SleepCountArgs, ctx: ToolContext) -> dict:
    path = count_file(args.key)
    await asyncio.to_thread(_append_line, path, f"{ctx.tool_call_id} attempt={ctx.attempt}\n")
    await asyncio.sleep(args.seconds)
    return {"slept": args.seconds, "executions": read_count(os.path.dirname(path), args.key)}


class FailArgs(Strict):
    message: str = Field("failing on purpose", max_length=1000)


async def fail_run(args: FailArgs, ctx: ToolContext):
    raise RuntimeError(args.message)


class RepeatArgs(Strict):
    text: str = Field(max_length=1000)
    times: int = Field(1, ge=0, le=100_000)


async def repeat_run(args: RepeatArgs, ctx: ToolContext) -> str:
    return args.text * args.times


ADD = Tool("add", "Add numbers: {numbers: [..]} -> {sum}.", add_run, AddArgs, timeout_s=5, idempotent=True)
SLEEP_COUNT = Tool("sleep_count", "Test tool: count one execution durably, then sleep `seconds`. Not idempotent.",
                   sleep_count_run, SleepCountArgs, timeout_s=660)
SLEEP_COUNT_IDEMPOTENT = Tool("sleep_count_idempotent", "Like sleep_count, but idempotent: run again after a crash.",
                              sleep_count_run, SleepCountArgs, timeout_s=660, idempotent=True)
REPEAT = Tool("repeat", "Test tool: `text` repeated `times` times (a large result on purpose).", repeat_run,
              RepeatArgs, timeout_s=5, idempotent=True)
FAIL = Tool("fail", "Test tool: fails on purpose with `message`.", fail_run, FailArgs, timeout_s=5)

BUILTINS = (WAIT, HUMAN, ASK_USER, ADD, SLEEP_COUNT, SLEEP_COUNT_IDEMPOTENT, REPEAT, FAIL)
