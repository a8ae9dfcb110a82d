"""Adding up what model calls cost: per step, and as a session's running totals.

A call may list its HTTP ``attempts`` (monikers/llm_call.py); a step's usage
then also says how many there were, how many failed (timeout, 5xx, 429,
unparseable, cancelled, unreachable, refused) and how many tokens those failed ones cost.
Their tokens are already in ``input_tokens``/``output_tokens``: a server bills
a request whatever became of it, so budgets count them too."""

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
    attempts = [a for call in calls for a in call.get("attempts") or []]
    if attempts:  # every HTTP request (monikers/llm_call.py); failed ones' tokens are in the sums above
        failed = [a for a in attempts if a.get("outcome") != "ok"]
        summary.update(attempts=len(attempts), failed_attempts=len(failed),
                       failed_tokens=sum((a.get("input_tokens") or 0) + (a.get("output_tokens") or 0)
                                         for a in failed))
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
    for f in ("attempts", "failed_attempts", "failed_tokens"):
        if step_usage.get(f) or totals.get(f):
            totals[f] = (totals.get(f) or 0) + (step_usage.get(f) or 0)
    return totals
