"""The flow decider: what happens after a step that returned neither tool
calls nor ``done``.

The profile's ``flow`` rules are tried in order; the first whose ``if``
holds (a rule without ``if`` always does) decides:

- ``continue``: the next step runs after the interval (also the default
  when no rule matches, and for sessions without a profile);
- ``wait_user``: status ``waiting``, reason ``user``, until a user message
  (guidance, a conversation message or an answer) arrives;
- ``end_turn``: status ``waiting``, reason ``idle``, until anything at all
  arrives in the inbox (a message, a child's result, an answer, a note).
"""
from profiles.conditions import Facts, holds
from profiles.model import FlowRule

DEFAULT = "continue"


def decide(rules: list[FlowRule], facts: Facts) -> tuple[str, int | None]:
    """The decision and the index of the rule that made it (None: the default)."""
    for i, rule in enumerate(rules):
        try:
            if holds(rule.if_, facts):
                return rule.then, i
        except Exception:  # a predicate on odd data; the rule simply does not match
            continue
    return DEFAULT, None
