"""Hooks for what happens in the runtime, for code that reacts to it
(live events to the dashboard, conversation messages) without the runner
knowing about any of it.

An observer is any object with some of these coroutine methods:

    async def session_created(self, snapshot: dict) -> None
    async def snapshot_saved(self, snapshot: dict) -> None      # after every durable save
    async def step_persisted(self, snapshot: dict, step: dict) -> None   # after the step row is durable
    async def action_started(self, action: dict) -> None   # its handler is about to run (each attempt)
    async def action_finished(self, action: dict, ok: bool, error: str | None) -> None
    async def tool_call_updated(self, row: dict) -> None   # a tool call's new status (runtime/session/tool_runner.py)
    async def tool_phase_loaded(self, agent, rows: list[dict]) -> None   # a step's calls, planned or recovered

They are awaited in order, after the write they describe is durable
(``action_started``: before the handler runs, so that what the action causes
comes after it).  One that
raises is logged and skipped: an observer can never break a session.

Live-only hooks describe nothing durable and are plain functions, called at once
with :meth:`Observers.notify_now` (they must not block):

    def step_delta(self, data: dict) -> None   # a step's model output while generated (runtime/base/live_output.py)

The hooks are declared once, as the :class:`Observer` protocol below.  An
observer is checked when it is added: one that has none of the hooks, or a
public method whose name is a near miss of a hook (``step_persistd``), is
refused with a TypeError, and notifying a hook that is not declared raises
ValueError: a misspelt hook fails at once, loudly, instead of never being called.
"""
import difflib
import inspect
import logging
from typing import Protocol

log = logging.getLogger("runtime.fanout")


class Observer(Protocol):
    """Every hook an observer may have; each is optional."""

    async def session_created(self, snapshot: dict) -> None: ...

    async def snapshot_saved(self, snapshot: dict) -> None: ...

    async def step_persisted(self, snapshot: dict, step: dict) -> None: ...

    async def action_started(self, action: dict) -> None: ...

    async def action_finished(self, action: dict, ok: bool, error: str | None) -> None: ...

    async def tool_call_updated(self, row: dict) -> None: ...

    async def tool_phase_loaded(self, agent, rows: list[dict]) -> None: ...

    def step_delta(self, data: dict) -> None: ...


HOOKS = frozenset(name for name in vars(Observer) if not name.startswith("_"))
LIVE_HOOKS = frozenset({"step_delta"})  # plain functions, called at once (notify_now)


def hooks_of(observer) -> dict[str, object]:
    """The hooks ``observer`` has, by name; TypeError when it has none, or has a
    public method named almost like a hook (a misspelling that would never be called)."""
    found = {name: getattr(observer, name) for name in HOOKS if callable(getattr(observer, name, None))}
    for name, _ in inspect.getmembers(type(observer), callable):
        if name.startswith("_") or name in HOOKS:
            continue
        near = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.85)
        if near:
            raise TypeError(f"{type(observer).__name__}.{name} is not an observer hook; did you mean {near[0]}?")
    if not found:
        raise TypeError(f"{type(observer).__name__} has none of the observer hooks ({', '.join(sorted(HOOKS))})")
    return found


class Observers:
    def __init__(self, *observers):
        self._hooks: list[dict[str, object]] = []
        self._names: list[str] = []
        for observer in observers:
            self.add(observer)

    def add(self, observer) -> None:
        self._hooks.append(hooks_of(observer))
        self._names.append(type(observer).__name__)

    def _methods(self, hook: str, live: bool):
        if hook not in HOOKS or (hook in LIVE_HOOKS) != live:
            raise ValueError(f"{hook!r} is not a{' live-only' if live else ' durable'} observer hook")
        return [(name, hooks[hook]) for name, hooks in zip(self._names, self._hooks) if hook in hooks]

    def notify_now(self, hook: str, *args) -> None:
        """Call a live-only hook of every observer that has it, now."""
        for name, method in self._methods(hook, live=True):
            try:
                method(*args)
            except Exception:
                log.exception("observer %s.%s failed", name, hook)

    async def notify(self, hook: str, *args) -> None:
        for name, method in self._methods(hook, live=False):
            try:
                await method(*args)
            except Exception:
                log.exception("observer %s.%s failed", name, hook)
