"""Every status a stored row can have, and the groups the service asks about.

Each enum's values are the strings written to LanceDB and sent over the API;
a ``StrEnum`` member compares equal to its string, so code may compare a row's
``status`` with either.  The groups are frozensets of plain strings, for ``in``
tests and for LanceDB filters (store/filters.py checks every word against the
enum's values before it goes into a filter string).
"""
from enum import StrEnum


def _values(*members: StrEnum) -> frozenset[str]:
    return frozenset(m.value for m in members)


class SessionStatus(StrEnum):
    """A session's status (``agent_state.status``)."""

    RUNNING = "running"
    WAITING = "waiting"    # its turn ended: it waits for input (status_reason says which)
    PAUSED = "paused"
    STOPPING = "stopping"  # a destroy is being applied
    STOPPED = "stopped"
    DONE = "done"
    ERROR = "error"


SESSION_STATUSES = _values(*SessionStatus)
# A finished session takes no more steps (a resume can restart one in error).
SESSION_FINISHED = _values(SessionStatus.STOPPED, SessionStatus.DONE, SessionStatus.ERROR)


class ActionStatus(StrEnum):
    """A control action's status in the queue (``agent_actions.status``)."""

    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"


ACTION_STATUSES = _values(*ActionStatus)
ACTION_FINISHED = _values(ActionStatus.DONE, ActionStatus.FAILED)


class ToolCallStatus(StrEnum):
    """A tool call's status (``tool_calls.status``)."""

    PENDING = "pending"
    WAITING_APPROVAL = "waiting_approval"  # a human approves or denies it first
    WAITING_RESULT = "waiting_result"      # a human (or another system) supplies its result
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    DENIED = "denied"
    UNKNOWN = "unknown"  # it was running when its worker died and is not safe to run again
    REPLAYED = "replayed"  # a replay served the recorded outcome (runtime/session/replay.py); it did not run


TOOL_CALL_STATUSES = _values(*ToolCallStatus)
TOOL_CALL_WAITING = _values(ToolCallStatus.WAITING_APPROVAL, ToolCallStatus.WAITING_RESULT)
TOOL_CALL_ENDED = _values(ToolCallStatus.SUCCESS, ToolCallStatus.FAILED, ToolCallStatus.DENIED,
                             ToolCallStatus.UNKNOWN, ToolCallStatus.REPLAYED)


class StepStatus(StrEnum):
    """A step's status (``agent_steps.status``)."""

    OK = "ok"
    DONE = "done"
    ERROR = "error"
    INTERRUPTED = "interrupted"


STEP_STATUSES = _values(*StepStatus)
