"""A step's model output while it is being generated, for people watching.

A moniker that calls a model streams its reply (monikers/llm_call.py) and
hands the text so far to ``StepContext.on_output`` at most ten times a second.
:func:`emitter` makes that callback for one step: it adds who and which
iteration it is and passes it to the observers' live-only ``step_delta`` hook,
which the relay sends to app.py (the ``step_delta`` event of domain/events.py)
and from there to the dashboard, ``GET /api/stream`` and ``agentsvc tail -f``.

Nothing of it is stored: the step row that follows is the record, and a crash
mid-stream loses only the partial text.
"""
from typing import Callable

from runtime.base.fanout import Observers


def emitter(observers: Observers, *, agent_id: str, session_id: str, conversation_id: str | None,
            iteration: int) -> Callable[[dict], None]:
    """The ``on_output`` callback of one step."""
    who = {"agent_id": agent_id, "session_id": session_id, "conversation_id": conversation_id,
           "iteration": iteration}

    def emit(delta: dict) -> None:
        observers.notify_now("step_delta", {**delta, **who})
    return emit
