"""Monikers and tools that exist only to test the service: crashes, hangs,
garbage frames, slow steps, large results, failing tools and tools that count
how often they really ran.

They are not offered in production.  tests/conftest.py names this module in
``AGENTSVC_PLUGINS`` (domain/plugin_registry.py) when it is imported, so the
registries built in the test process and in every agents.py and app.py the
tests start (they inherit the environment) include them.

Monikers:

- ``chaos``: behaves like a counter, then fails on purpose at step
  ``config.fail_at`` (``mode``: raise | hang | garbage | transient), to show
  that one bad agent cannot hurt the others; ``transient`` fails
  ``config.failures`` times (default 2) with an error marked transient, then
  succeeds.
- ``sleepy``: a counter whose every step takes ``config.sleep_s`` (default 1)
  seconds, like a slow LLM call; for heartbeats and crashes mid-step.

Scorers (evals/scorers.py):

- ``answer_length``: the length of the replay's final answer (a plugin scorer,
  for the eval tests).

Tools:

- ``add``: adds numbers.
- ``sleep_count`` / ``sleep_count_idempotent``: sleep ``seconds``, after
  appending one line to ``<AGENTSVC_TOOL_COUNT_DIR>/<key>.count`` (fsynced),
  so a test can prove how many times a call's tool really started, across
  kill -9.  The directory comes from the environment of agents.py (the
  operator's, never a call's); a call only names a key matching
  ``[A-Za-z0-9_-]{1,64}``.  Without the variable set the tools fail with a
  message saying so.
- ``repeat``: ``text`` repeated ``times`` times (a result over the cap, on purpose).
- ``fail``: fails on purpose with ``message``.
"""
import asyncio
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from domain.json_types import JsonInt
from monikers.frame import FrameIn, FrameOut, Moniker, StepContext
from tools.tool import Tool, ToolContext
from evals.scorers import Score, Scorer
from evals.judge import final_answer

COUNT_DIR_ENV = "AGENTSVC_TOOL_COUNT_DIR"


# ---- monikers ---------------------------------------------------------------

class _Config(BaseModel):
    """A moniker's own config keys; anything else (besides the runner's keys) is refused at create."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ChaosConfig(_Config):
    fail_at: JsonInt = Field(1, ge=1, le=1_000_000, description="the step (counting from 1) that fails")
    mode: Literal["raise", "hang", "garbage", "transient"] = Field("raise", description="how it fails")
    failures: JsonInt = Field(2, ge=0, le=100, description="mode transient: failures before it succeeds")


class SleepyConfig(_Config):
    sleep_s: float = Field(1.0, ge=0, le=3600, description="seconds each step takes")


class TransientError(RuntimeError):
    """A failure worth retrying (the runner reads ``transient``)."""

    transient = True


_transient_failures: dict[tuple[str, str], int] = {}


async def chaos_step(frame: FrameIn, ctx: StepContext):
    n = int(frame.state.get("n", 0))
    if n + 1 >= int(ctx.config.get("fail_at", 1)):
        mode = ctx.config.get("mode", "raise")
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "garbage":
            return {"this": "is not a frame", "next_step": 42}
        if mode == "transient":
            key = (ctx.session_id, frame.step)
            _transient_failures[key] = _transient_failures.get(key, 0) + 1
            if _transient_failures[key] <= int(ctx.config.get("failures", 2)):
                raise TransientError(f"chaos: transient failure {_transient_failures[key]} at step {n + 1}")
        else:
            raise RuntimeError(f"chaos: failing on purpose at step {n + 1}")
    return FrameOut(step=frame.step, next_step=str(n + 1), state={"n": n + 1}, text=f"step {n + 1} fine")


async def sleepy_step(frame: FrameIn, ctx: StepContext) -> FrameOut:
    await asyncio.sleep(float(ctx.config.get("sleep_s", 1.0)))
    n = int(frame.state.get("n", 0)) + 1
    return FrameOut(step=frame.step, next_step=str(n), state={"n": n}, text=f"slept through step {n}")


CHAOS = Moniker("chaos", chaos_step,
                "Test moniker: fails at step config.fail_at (mode raise | hang | garbage | transient).",
                config_model=ChaosConfig)
SLEEPY = Moniker("sleepy", sleepy_step, "Test moniker: each step takes config.sleep_s seconds (default 1).",
                 config_model=SleepyConfig)


# ---- tools ------------------------------------------------------------------

class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AddArgs(Strict):
    numbers: list[float] = Field(min_length=1, max_length=1000)


async def add_run(args: AddArgs, ctx: ToolContext) -> dict:
    total = sum(args.numbers)
    return {"sum": int(total) if total.is_integer() else total}


class SleepCountArgs(Strict):
    seconds: float = Field(0.0, ge=0, le=600)
    key: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="name of the counter file")
    then_seconds: float | None = Field(None, ge=0, le=600,
                                       description="how long the executions after the first sleep (default: seconds)")


def count_file(key: str) -> str:
    directory = os.environ.get(COUNT_DIR_ENV)
    if not directory:
        raise RuntimeError(f"sleep_count needs the operator to set {COUNT_DIR_ENV} for agents.py")
    return os.path.join(directory, f"{key}.count")


def read_count(directory: str, key: str) -> int:
    """How many times the tool started for ``key``."""
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
    executions = read_count(os.path.dirname(path), args.key)
    seconds = args.seconds if executions == 1 or args.then_seconds is None else args.then_seconds
    await asyncio.sleep(seconds)
    return {"slept": seconds, "executions": executions}


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

MONIKERS = (CHAOS, SLEEPY)
TOOLS = (ADD, SLEEP_COUNT, SLEEP_COUNT_IDEMPOTENT, REPEAT, FAIL)


def answer_length(source: dict, replay: dict, context: dict) -> Score:
    return Score(float(len(final_answer(replay))), None, {"source": len(final_answer(source))})


SCORERS = (Scorer("answer_length", "Test scorer: characters of the replay's final answer.", answer_length),)
