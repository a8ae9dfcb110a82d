"""Hooks for what happens in the runtime, for code that reacts to it
(live events to the dashboard, conversation messages) without the runner
knowing about any of it.

An observer is any object with some of these coroutine methods:

    async def session_created(self, snapshot: dict) -> None
    async def snapshot_saved(self, snapshot: dict) -> None      # after every durable save
    async def step_persisted(self, snapshot: dict, step: dict) -> None   # after the step row is durable
    async def action_finished(self, action: dict, ok: bool, error: str | None) -> None
    async def tool_call_updated(self, row: dict) -> None   # a tool call's new status (runtime/session/tool_runner.py)
    async def tool_phase_loaded(self, agent, rows: list[dict]) -> None   # a step's calls, planned or recovered

They are awaited in order, after the write they describe is durable.  One that
raises is logged and skipped: an observer can never break a session.

Live-only hooks describe nothing durable and are plain functions, called at once
with :meth:`Observers.notify_now` (they must not block):

    def step_delta(self, data: dict) -> None   # a step's model output while generated (runtime/base/live_output.py)
"""
import logging

log = logging.getLogger("runtime.fanout")


class Observers:
    def __init__(self, *observers):
        self._observers = list(observers)

    def add(self, observer) -> None:
        self._observers.append(observer)

    def notify_now(self, hook: str, *args) -> None:
        """Call a live-only hook of every observer that has it, now."""
        for observer in self._observers:
            method = getattr(observer, hook, None)
            if method is None:
                continue
            try:
                method(*args)
            except Exception:
                log.exception("observer %s.%s failed", type(observer).__name__, hook)

    async def notify(self, hook: str, *args) -> None:
        for observer in self._observers:
            method = getattr(observer, hook, None)
            if method is None:
                continue
            try:
                await method(*args)
            except Exception:
                log.exception("observer %s.%s failed", type(observer).__name__, hook)
