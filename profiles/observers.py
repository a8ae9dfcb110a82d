"""Profile observers: declared in a profile, run before and after each step.

(Not to be confused with ``runtime/base/fanout.py``, the fan-out of runtime
events to live clients and metrics.)

An observer has a ``when`` (``before_step`` | ``after_step``), a condition
(profiles/conditions.py) and an action:

- ``note``: an inbox item of kind ``observer_note`` for the next step (a
  before_step note reaches the step about to run); the text is a template
  (profiles/template.py);
- ``pause`` / ``stop``: the session is paused / stopped, reason ``observer``;
- ``ask_user``: the session waits for the user (status ``waiting``, reason
  ``user``) until a user message arrives.  (Routing through the ``ask_user``
  tool is the ask helper's work; this waits the same way a flow rule's
  ``wait_user`` does.)

Python observers are installed like monikers and tools, under the
entry-point group ``agentsvc.observers``: the entry point is a callable
``fn(facts: Facts, args: dict)`` returning None or one action as a dict
(``{"note": "..."}``, ``{"pause": "why"}``, ``{"stop": "why"}``,
``{"ask_user": "question"}``), or an awaitable of that.  A profile uses it as
``{name: ..., when: ..., python: <entry point name>, with: {...}}``.

An observer that raises (or returns something else, or, when async, takes
longer than ``TIMEOUT_S``) is logged, skipped for that step and recorded on
the step row (``observers`` column) with its error; it never stops the
session.  A python observer runs on the worker's event loop: a synchronous
one must return quickly (it cannot be interrupted).
"""
import asyncio
import functools
import inspect
import logging
from importlib.metadata import entry_points

from profiles.conditions import Facts, holds
from profiles.model import Observer, ObserverAction
from profiles.template import render

log = logging.getLogger("profiles.observers")

ENTRY_POINT_GROUP = "agentsvc.observers"
TIMEOUT_S = 10.0  # an async python observer taking longer fails (recorded as its error) and is skipped
ACTIONS = ("note", "pause", "stop", "ask_user")


@functools.cache
def observer_plugins() -> dict:
    """Name -> callable, for every observer installed under the entry-point group.
    A plugin that fails to load is logged and left out (a profile naming it is
    then refused with that reason)."""
    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found[ep.name] = ep.load()
        except Exception as exc:
            log.error("observer plugin %s (%s) failed to load: %s", ep.name, ep.value, exc)
    return found


def _plugin_action(value) -> ObserverAction | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"a python observer returns None or a dict with one of {ACTIONS}, "
                        f"not {type(value).__name__}")
    return ObserverAction.model_validate(value)


async def evaluate(observer: Observer, facts: Facts, fields: dict) -> dict:
    """Run one observer; the outcome as recorded on the step row:
    ``{name, fired, action?, text?, error?}``.  Never raises."""
    outcome = {"name": observer.name, "fired": False}
    try:
        if observer.python:
            fn = observer_plugins().get(observer.python)
            if fn is None:
                raise LookupError(f"observer plugin {observer.python!r} is not installed")
            result = fn(facts, dict(observer.with_))
            if inspect.isawaitable(result):  # bounded: a hanging observer must not hold the session
                result = await asyncio.wait_for(result, TIMEOUT_S)
            action = _plugin_action(result)
        else:
            action = observer.then if holds(observer.if_, facts) else None
        if action is None:
            return outcome
        outcome.update(fired=True, action=action.kind)
        if action.kind == "note":
            outcome["text"] = render(action.note, fields)
        elif action.kind == "ask_user":
            outcome["text"] = facts.text if action.ask_user is True else action.ask_user
        else:
            outcome["text"] = getattr(action, action.kind)
    except Exception as exc:
        log.warning("observer %s failed and was skipped (%s step, iteration %d): %s: %s", observer.name,
                    facts.phase, facts.iteration, type(exc).__name__, exc)
        outcome.update(fired=False, error=f"{type(exc).__name__}: {exc}"[:500])
    return outcome
