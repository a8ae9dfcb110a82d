"""When a session must stop or pause on its own: step and time limits,
repeated output, and token or cost budgets."""
from collections import deque
from datetime import datetime, timezone

from domain.session_config import SessionConfig


def limit_reached(config: SessionConfig, iteration: int, created_at: datetime) -> str | None:
    """'max_steps' or 'max_runtime' when the session has used up its allowance."""
    if config.max_steps is not None and iteration + 1 >= config.max_steps:
        return "max_steps"
    if config.max_runtime_s is not None:
        if (datetime.now(timezone.utc) - created_at).total_seconds() >= config.max_runtime_s:
            return "max_runtime"
    return None


def over_budget(config: SessionConfig, totals: dict | None, last_step: dict | None) -> str | None:
    """Whether the next step would (probably) exceed the budget.

    The next step is estimated to cost what the last one did, so the session
    pauses *before* it crosses the line rather than after.
    """
    totals, last_step = totals or {}, last_step or {}
    if config.budget_tokens is not None:
        used = (totals.get("input_tokens") or 0) + (totals.get("output_tokens") or 0)
        next_ = (last_step.get("input_tokens") or 0) + (last_step.get("output_tokens") or 0)
        if used + next_ > config.budget_tokens:
            return f"tokens: {used} used, ~{next_} more would pass the budget of {config.budget_tokens}"
    if config.budget_cost is not None:
        used, next_ = totals.get("cost") or 0.0, last_step.get("cost") or 0.0
        if used + next_ > config.budget_cost:
            return f"cost: {used:.4f} used, ~{next_:.4f} more would pass the budget of {config.budget_cost}"
    return None


class RepetitionWatch:
    """Counts how many times in a row the same text came out."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self._recent: deque[str | None] = deque(maxlen=limit or 1)

    def repeated(self, text: str | None) -> bool:
        if not self.limit:
            return False
        self._recent.append(text)
        return (len(self._recent) == self.limit and text is not None
                and all(t == text for t in self._recent))
