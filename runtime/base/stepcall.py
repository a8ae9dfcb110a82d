"""Calling a moniker once, robustly: timeout, heartbeats, retries.

The outcome is either a valid frame_out or an error with its class:

- ``transient``: the moniker marked the error transient (``exc.transient``) or
  it is a connection error: worth trying again after a pause;
- ``timeout``: the step ran past ``step_timeout_s`` and was cancelled;
- ``invalid_output``: what came back is not a valid frame_out;
- ``error``: anything else.

Each class has its own retry count in the session's ``retries`` config; waits
grow exponentially with full jitter so that many agents failing together do
not retry together.  While a step runs longer than ``heartbeat_s`` the
``on_long_step`` callback fires every ``heartbeat_s``: the session records that
a step is in flight, so a long LLM call is not mistaken for a dead worker and a
crash in the middle of it can be reported afterwards.
"""
import asyncio
import dataclasses
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from pydantic import ValidationError

from monikers.frame import FrameIn, FrameOut, Moniker, StepContext
from domain.session_config import RetryPolicy

log = logging.getLogger("runtime.stepcall")

CANCEL_GRACE_S = 2.0  # how long a cancelled step may take to wind down


@dataclass
class Outcome:
    out: FrameOut | None = None
    error: str | None = None
    error_class: str | None = None
    raw: Any = None
    attempts: int = 1
    retried: list[str] = field(default_factory=list)


def classify(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ValidationError):
        return "invalid_output"
    if getattr(exc, "transient", False) or isinstance(exc, ConnectionError):
        return "transient"
    return "error"


def describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"step timed out after {timeout_s}s"
    if isinstance(exc, ValidationError):
        return f"invalid frame_out: {exc.error_count()} error(s): " + "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()[:5])
    return f"{type(exc).__name__}: {exc}"


def backoff(attempt: int, policy: RetryPolicy) -> float:
    """Full jitter: uniform in [0, min(max, base * 2^(attempt-1))]."""
    return random.uniform(0, min(policy.max_delay_s, policy.base_delay_s * 2 ** (attempt - 1)))


async def call_moniker(moniker: Moniker, frame_in: FrameIn, ctx: StepContext, *, timeout_s: float,
                       policy: RetryPolicy, heartbeat_s: float,
                       on_long_step: Callable[[float], Awaitable[None]]) -> Outcome:
    attempt = 0
    retried: list[str] = []
    while True:
        attempt += 1
        raw = None
        try:
            # The moniker knows when it will be cancelled, so a model call can end first, with its own error.
            # A caller may set the first attempt's deadline itself (the session does: one context per step).
            attempt_ctx = ctx if attempt == 1 and ctx.deadline is not None else \
                dataclasses.replace(ctx, deadline=time.monotonic() + timeout_s)
            raw = await _with_heartbeats(moniker.step(frame_in, attempt_ctx), timeout_s, heartbeat_s, on_long_step)
            out = raw if isinstance(raw, FrameOut) else FrameOut.model_validate(raw)
            return Outcome(out=out, raw=raw, attempts=attempt, retried=retried)
        except Exception as exc:
            kind = classify(exc)
            message = describe(exc, timeout_s)
            if attempt <= getattr(policy, kind):
                delay = backoff(attempt, policy)
                retried.append(f"{kind}: {message}"[:300])
                log.info("session %s step %d: %s; retry %d in %.2fs", ctx.session_id, ctx.iteration, message,
                         attempt, delay)
                await asyncio.sleep(delay)
                continue
            raw = getattr(exc, "raw_output", None) if raw is None else raw
            return Outcome(error=message, error_class=kind, raw=raw, attempts=attempt, retried=retried)


async def _with_heartbeats(coro, timeout_s: float, heartbeat_s: float,
                           on_long_step: Callable[[float], Awaitable[None]]):
    """Await ``coro`` with a timeout, calling ``on_long_step(started)`` every
    ``heartbeat_s`` while it runs; cancels it on timeout or when cancelled.

    The moniker runs in a task of its own, so that one which swallows its
    cancellation can be abandoned.  Waiting on it costs one future and one
    timer per wake-up (the step's end, the next heartbeat or the deadline):
    this runs once per step of every agent, and ``asyncio.wait`` with a
    timeout cost several times that (profiled at 1,000 agents).

    Most steps that never wait (a scripted or cached moniker, a tool step's
    bookkeeping) end within the task's first run: one yield to the loop lets
    it run, and such a step then costs no timer and no waiter at all."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coro)
    started = time.time()
    deadline = loop.time() + timeout_s
    next_beat = loop.time() + heartbeat_s
    try:
        await asyncio.sleep(0)  # the task runs first: it was scheduled before this coroutine resumes
        while not task.done():
            if loop.time() >= deadline:
                raise TimeoutError
            await _first_of(loop, task, min(deadline, next_beat))
            if not task.done() and loop.time() >= next_beat:
                next_beat += heartbeat_s
                await on_long_step(started)
        return task.result()
    finally:
        if not task.done():
            task.cancel()
            # Bounded: a moniker that swallows cancellation must not hold the
            # session (or shutdown) hostage; it is abandoned, and logged.
            await asyncio.wait({task}, timeout=CANCEL_GRACE_S)
            if not task.done():
                log.error("a step of moniker task %s ignored cancellation; abandoning it", task.get_name())


async def _first_of(loop: asyncio.AbstractEventLoop, task: asyncio.Future, when: float) -> None:
    """Return when ``task`` is done or the loop's clock reaches ``when``."""
    waiter = loop.create_future()

    def wake(_=None):
        if not waiter.done():
            waiter.set_result(None)

    task.add_done_callback(wake)
    timer = loop.call_at(when, wake)
    try:
        await waiter
    finally:
        timer.cancel()
        task.remove_done_callback(wake)
