"""The session's inbox: what reaches an agent between two steps, in priority order.

Everything that arrives for a session while it is not stepping (user guidance,
conversation messages, a child's result, an observer's note,
the runner's note about an interrupted step) is an *inbox item*.  Items are kept
durably in the session snapshot (``pending_guidance``) until the step that
consumes them is persisted, and each carries the id of the action (or event)
that brought it, so a redelivery after a crash is refused instead of consumed
twice.

The next ``frame_in.inbox`` hands them to the moniker in priority order: a
lower number comes first, and items of one priority keep their arrival order.
Tool results are not inbox items (they have their own ``frame_in.tool_results``,
which always come first), and neither is the answer to an ``ask_user`` question:
it is that call's result (runtime/dispatch/questions.py).  A profile may override the priorities per kind.
"""
from typing import Any

# Priority per kind: lower first.  Unknown kinds sort with user messages.
DEFAULT_PRIORITIES: dict[str, int] = {
    "child_result": 10,      # a sub-agent finished, failed or was stopped
    "interrupted_step": 30,  # the runner: the previous step died with its worker
    "observer_note": 30,     # an observer's reminder
    "parent_context": 30,    # the parent's transcript, in a child's first step
    "system": 30,
    "guidance": 40,          # a user's guidance (POST .../interrupt)
    "message": 40,           # a user's message in the session's conversation
}
USER_PRIORITY = 40

# Kinds whose text is joined into ``frame_in.guidance`` for v0 monikers.
GUIDANCE_KINDS = frozenset({"guidance", "message"})


def kind_of(item: dict) -> str:
    return item.get("kind") or "guidance"


def ordered(items: list[dict], priorities: dict[str, int] | None = None) -> list[dict]:
    """``items`` (in arrival order) sorted by priority, stable within one priority."""
    table = {**DEFAULT_PRIORITIES, **(priorities or {})}
    return sorted(items, key=lambda item: table.get(kind_of(item), USER_PRIORITY))


def frame_item(item: dict) -> dict:
    """A queued item as a StepFrame-v1 inbox entry (the queue's bookkeeping dropped)."""
    out: dict[str, Any] = {"kind": kind_of(item), "text": item.get("text")}
    if item.get("data") is not None:
        out["data"] = item["data"]
    if item.get("source"):
        out["source"] = item["source"]
    return out


def guidance_text(items: list[dict]) -> str | None:
    """User guidance joined for v0 monikers' ``frame_in.guidance``."""
    return "\n".join(i["text"] for i in items if kind_of(i) in GUIDANCE_KINDS and i.get("text")) or None
