"""The safe predicates of observers and flow rules.

A condition is a mapping of predicate names to arguments (profiles/model.py,
``Condition``); every predicate given must hold, and ``all`` / ``any`` /
``not`` combine conditions.  Each predicate is a small Python function over
:class:`Facts`; nothing from a profile or a user is ever evaluated as code.
"""
import re
from dataclasses import dataclass, field
from typing import Any

QUESTION = re.compile(r"\?(\s|[\"')\]]|$)")


@dataclass
class Facts:
    """What a condition may look at: the frame and the session, at one moment.

    ``phase`` is ``before_step`` (``out`` is None: no step has run yet) or
    ``after_step`` / ``flow`` (``out`` is the step's frame_out)."""

    phase: str
    iteration: int
    state: dict
    inbox: list[dict]
    usage: dict | None
    steps_without_tools: int
    text: str | None = None
    done: bool = False
    tool_calls: list[dict] = field(default_factory=list)
    out: Any = None


def _text(f: Facts) -> str:
    return f.text or ""


PREDICATES = {
    "always": lambda f, v: bool(v),
    "iteration_at_least": lambda f, v: f.iteration >= v,
    "no_tool_calls_for": lambda f, v: f.steps_without_tools >= v,
    "has_tool_calls": lambda f, v: bool(f.tool_calls) == v,
    "called_tool": lambda f, v: any(c.get("name") == v for c in f.tool_calls),
    "done": lambda f, v: f.done == v,
    "text_has_question": lambda f, v: bool(QUESTION.search(_text(f))) == v,
    "text_contains": lambda f, v: v.lower() in _text(f).lower(),
    "text_matches": lambda f, v: re.search(v, _text(f)) is not None,
    "inbox_has": lambda f, v: any((i.get("kind") or "guidance") == v for i in f.inbox),
    "state_has": lambda f, v: isinstance(f.state, dict) and v in f.state,
    "tokens_over": lambda f, v: ((f.usage or {}).get("input_tokens") or 0)
                                + ((f.usage or {}).get("output_tokens") or 0) > v,
    "cost_over": lambda f, v: ((f.usage or {}).get("cost") or 0.0) > v,
}


def holds(condition, facts: Facts) -> bool:
    """Whether ``condition`` (a ``Condition`` model) holds for ``facts``."""
    if condition is None:
        return True
    for name in condition.model_fields_set:
        value = getattr(condition, name)
        if name == "all":
            ok = all(holds(c, facts) for c in value or [])
        elif name == "any":
            ok = any(holds(c, facts) for c in value or [])
        elif name == "not_":
            ok = not holds(value, facts)
        else:
            ok = PREDICATES[name](facts, value)
        if not ok:
            return False
    return True
