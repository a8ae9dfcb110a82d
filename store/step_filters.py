"""Which steps a timeline filter keeps (``GET /api/agent-steps?only=...&attempt_outcome=...``).

The filters, and what each one means:

- ``errors``: the step failed (``status = 'error'``).
- ``tool_calls``: the step asked for tool calls (``tool_calls`` is a non-empty list).
- ``interrupted``: the step was cut off when its worker died (``status =
  'interrupted'``, recorded by ``SessionAgent.reconcile``).  This is not what
  the dashboard's guidance does: ``POST .../interrupt`` interrupts no step.
- ``guided``: the step was handed a person's guidance: its ``guidance`` column
  (the inbox items its ``frame_in`` carried) holds an item of kind
  ``guidance`` (``POST /api/agents/<id>/interrupt``) or ``message`` (a message
  in the session's conversation).  Other inbox items (a child's result, an
  observer's note, the runner's note about an interrupted step) do not count.
  An error step lists the guidance it was handed too, though the guidance
  stays queued and the retry is handed it again: both steps match.
- ``attempt_outcome=<outcome>``: at least one HTTP attempt of one of the
  step's model calls ended so (``usage.calls[].attempts[].outcome``,
  monikers/llm_call.py).

The first three are exact as column filters, so LanceDB sorts and pages
them.  The last two look inside JSON text: a column filter only narrows them
to candidates (``LIKE`` on a word of a closed set, which holds no ``%`` or
``_``), and :func:`matches` decides on the decoded row; store/steps.py then
pages the matching rows itself, so a page never skips or repeats a step.
"""
from domain.statuses import StepStatus
from store import filters

ONLY = ("errors", "tool_calls", "interrupted", "guided")
ATTEMPT_OUTCOMES = ("ok", "timeout", "5xx", "429", "unparseable", "cancelled", "unreachable", "error",
                    "truncated")
GUIDED_KINDS = frozenset({"guidance", "message"})  # what a person sends (runtime/base/inbox.py)


def exact(only: str | None, attempt_outcome: str | None) -> bool:
    """Whether the column filter of :func:`where` is the whole answer."""
    return only != "guided" and attempt_outcome is None


def where(only: str | None, attempt_outcome: str | None) -> str | None:
    """The column filter: the answer (see :func:`exact`), or candidates for :func:`matches`."""
    clauses = []
    if only == "errors":
        clauses.append(filters.eq_word("status", StepStatus.ERROR.value, {StepStatus.ERROR.value}))
    elif only == "interrupted":
        clauses.append(filters.eq_word("status", StepStatus.INTERRUPTED.value, {StepStatus.INTERRUPTED.value}))
    elif only == "tool_calls":
        # a step without calls stores null (runtime/session/agent.py); "[]" is ruled out too
        clauses.append(filters.is_set("tool_calls", "[]"))
    elif only == "guided":
        clauses.append(filters.is_set("guidance"))
    elif only is not None:
        raise ValueError(f"only must be one of {list(ONLY)}")
    if attempt_outcome is not None:
        # the word as a JSON string anywhere in the text: candidates, whatever the spacing
        clauses.append(filters.has_json_word("usage", attempt_outcome, ATTEMPT_OUTCOMES))
    return filters.all_of(*clauses)


def columns(only: str | None, attempt_outcome: str | None) -> tuple[str, ...]:
    """The columns :func:`matches` reads (candidates are read with these alone)."""
    wanted = ["id", "session_id", "iteration", "created_at"]
    if only == "guided":
        wanted.append("guidance")
    if attempt_outcome is not None:
        wanted.append("usage")
    return tuple(wanted)


def matches(row: dict, only: str | None, attempt_outcome: str | None) -> bool:
    """Whether a decoded candidate row (of :func:`where`) is kept."""
    if only == "guided" and not guided(row.get("guidance")):
        return False
    if attempt_outcome is not None and attempt_outcome not in outcomes(row.get("usage")):
        return False
    return True


def guided(items) -> bool:
    return isinstance(items, list) and any(
        isinstance(item, dict) and (item.get("kind") or "guidance") in GUIDED_KINDS for item in items)


def outcomes(usage) -> set[str]:
    """Every attempt outcome of a step's usage."""
    if not isinstance(usage, dict):
        return set()
    found = set()
    for call in usage.get("calls") or []:
        for attempt in (call.get("attempts") or []) if isinstance(call, dict) else []:
            if isinstance(attempt, dict) and isinstance(attempt.get("outcome"), str):
                found.add(attempt["outcome"])
    return found
