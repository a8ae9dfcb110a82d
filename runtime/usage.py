"""Adding up what model calls cost: per step, and as a session's running totals."""

FIELDS = ("input_tokens", "output_tokens", "duration_ms", "cost")


def summarize(calls: list[dict]) -> dict | None:
    """The usage of one step: its calls and their sums (None when there were none)."""
    if not calls:
        return None
    summary = {f: 0 for f in FIELDS}
    priced = False
    for call in calls:
        for f in ("input_tokens", "output_tokens", "duration_ms"):
            summary[f] += call.get(f) or 0
        if call.get("cost") is not None:
            summary["cost"] += call["cost"]
            priced = True
    if not priced:
        summary["cost"] = None
    waited = sum(call.get("rate_wait_ms") or 0 for call in calls)
    if waited:
        summary["rate_wait_ms"] = waited  # time the calls waited for the model's shared rate limit
    summary["calls"] = calls
    return summary


def accumulate(totals: dict | None, step_usage: dict | None) -> dict | None:
    """Running totals of a session after one more step."""
    if not step_usage:
        return totals
    totals = dict(totals or {"input_tokens": 0, "output_tokens": 0, "duration_ms": 0.0, "cost": None, "calls": 0})
    for f in ("input_tokens", "output_tokens", "duration_ms"):
        totals[f] = (totals.get(f) or 0) + (step_usage.get(f) or 0)
    if step_usage.get("cost") is not None:
        totals["cost"] = (totals.get("cost") or 0) + step_usage["cost"]
    totals["calls"] = (totals.get("calls") or 0) + len(step_usage.get("calls") or [])
    if step_usage.get("rate_wait_ms"):
        totals["rate_wait_ms"] = (totals.get("rate_wait_ms") or 0) + step_usage["rate_wait_ms"]
    return totals
