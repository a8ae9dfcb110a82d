"""Two records of one lineage, compared step by step (pure: no store, no I/O).

A *record* is what is kept of a session: ``{"snapshot": dict, "steps": [step
rows, oldest first], "tool_calls": [tool call rows]}``.  A replay keeps its
source's iteration numbers and a fork continues them, so steps are paired by
equal iteration.  The iterations before both records have steps of their own
are shared history (a fork's or replay's are its source's) and are not
compared; a replay that was told to stop at ``to_iteration`` is compared up to
there only.

Used by ``GET /api/sessions/<id>/diff`` and by the eval scorers
(evals/scorers.py), so what counts as a divergence is decided once, here: a
step whose text, tool calls (name, args, status; a call served from the
recording counts as the status it had there) or status differ, or a step that
only one record took.  State, tokens and cost are shown, never a divergence
(a different model's state or spend differs without the run going elsewhere).
"""
import json

from domain.statuses import SESSION_FINISHED, SessionStatus

MAX_ITERATIONS = 2000  # compared per diff; past it the answer says it was cut
MAX_TEXT = 4000  # characters of a step's text shown (the comparison uses all of it)
MAX_STATE_OPS = 100  # state differences listed per iteration
MAX_VALUE = 1000  # characters of JSON of a before/after value shown
ABSENT = object()


def diff_records(a: dict, b: dict, limit: int = MAX_ITERATIONS) -> dict:
    """Per iteration, ``a`` against ``b``; the first divergence; totals per side."""
    steps_a, steps_b = _by_iteration(a), _by_iteration(b)
    span, skipped = _span(a, b, steps_a, steps_b)
    cut = len(span) > limit
    span = span[:limit]
    calls_a, calls_b = _calls_by_iteration(a), _calls_by_iteration(b)
    rows = [_pair(i, steps_a.get(i), steps_b.get(i), calls_a.get(i), calls_b.get(i)) for i in span]
    first = next((r for r in rows if r["differs"]), None)
    return {
        "a": _side_summary(a, steps_a, calls_a), "b": _side_summary(b, steps_b, calls_b),
        "iterations": rows,
        "first_divergence": _divergence(first) if first else None,
        "summary": {"compared": len(rows), "differing": sum(1 for r in rows if r["differs"]),
                    "unfinished": [k for k, r, st in (("a", a, steps_a), ("b", b, steps_b))
                                   if _unfinished_end(r, st) is not None],
                    "state_differing": sum(1 for r in rows if r["state"]), "shared_before": skipped,
                    "truncated": cut, "limit": limit},
    }


def first_divergence(a: dict, b: dict, limit: int = MAX_ITERATIONS) -> dict | None:
    """The first iteration where the two records' text, tool calls or status
    differ (or only one took a step): ``{iteration, what, detail, a, b}``; None
    when they agree on every iteration compared."""
    return diff_records(a, b, limit)["first_divergence"]


# ---- pairing -----------------------------------------------------------------

def _by_iteration(record: dict) -> dict[int, dict]:
    """The record's steps by iteration (the newest row, should one repeat)."""
    found = {}
    for step in record.get("steps") or []:
        found[int(step["iteration"])] = step
    return found


def _calls_by_iteration(record: dict) -> dict[int, list[dict]]:
    found: dict[int, list[dict]] = {}
    for row in record.get("tool_calls") or []:
        found.setdefault(int(row["iteration"]), []).append(row)
    for rows in found.values():
        rows.sort(key=lambda r: (r.get("seq") or 0))
    return found


def _to_iteration(record: dict) -> int | None:
    replay = (record.get("snapshot") or {}).get("replay") or {}
    end = replay.get("to_iteration") if isinstance(replay, dict) else None
    return end if isinstance(end, int) else None


def _unfinished_end(record: dict, steps: dict) -> int | None:
    """The newest step of a session still on its way (it may take the next
    ones yet, so they are not "only the other took it"); None once it finished
    or waits for input (as the eval runner counts it: what it did is its answer)."""
    status = (record.get("snapshot") or {}).get("status")
    if status is None or status in SESSION_FINISHED or status == SessionStatus.WAITING:
        return None
    return max(steps) if steps else -1


def _span(a: dict, b: dict, steps_a: dict, steps_b: dict) -> tuple[list[int], int]:
    """The iterations compared (from where both have steps of their own, up to
    where both could have: a replay's ``to_iteration``, an unfinished session's
    newest step) and how many earlier ones were shared history, skipped."""
    ends = [e for e in (_to_iteration(a), _to_iteration(b), _unfinished_end(a, steps_a), _unfinished_end(b, steps_b))
            if e is not None]
    if not steps_a or not steps_b:
        every = sorted(set(steps_a) | set(steps_b))
        return [i for i in every if not ends or i <= min(ends)], 0
    start = max(min(steps_a), min(steps_b))
    end = min(ends) if ends else None
    every = sorted(set(steps_a) | set(steps_b))
    kept = [i for i in every if i >= start and (end is None or i <= end)]
    return kept, sum(1 for i in every if i < start)


def _pair(iteration: int, step_a, step_b, rows_a, rows_b) -> dict:
    side_a, side_b = _side(step_a, rows_a), _side(step_b, rows_b)
    what = _what_differs(side_a, side_b)
    state = _state_ops(step_a, step_b) if step_a and step_b else []
    return {"iteration": iteration, "a": _shown(side_a), "b": _shown(side_b), "differs": what,
            "state": state}


def _side(step: dict | None, rows: list[dict] | None) -> dict | None:
    if step is None:
        return None
    usage = step.get("usage") if isinstance(step.get("usage"), dict) else {}
    return {"text": step.get("text"), "status": step.get("status"), "error": step.get("error"),
            "tool_calls": _tool_calls(step, rows),
            "tokens": (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0),
            "cost": usage.get("cost")}


def _tool_calls(step: dict, rows: list[dict] | None) -> list[dict]:
    """The step's calls as compared: its tool call rows, or (none stored) what
    the step asked for, with no status."""
    if rows:
        return [{"name": r.get("name"), "args": json_value(r.get("args")), "status": _status(r)} for r in rows]
    asked = step.get("tool_calls") if isinstance(step.get("tool_calls"), list) else []
    return [{"name": c.get("name"), "args": json_value(c.get("args")), "status": None} for c in asked
            if isinstance(c, dict)]


def _status(row: dict) -> str | None:
    """A call served from the recording counts as what it was there."""
    if row.get("status") == "replayed":
        return row.get("replayed_status") or "success"
    return row.get("status")


def json_value(value):
    """Args as JSON values (a row not decoded yet holds them as text)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _what_differs(side_a: dict | None, side_b: dict | None) -> list[str]:
    if side_a is None or side_b is None:
        return ["step"] if (side_a or side_b) else []
    return [k for k in ("text", "tool_calls", "status") if side_a[k] != side_b[k]]


def _shown(side: dict | None) -> dict | None:
    if side is None:
        return None
    text = side["text"]
    if isinstance(text, str) and len(text) > MAX_TEXT:
        return {**side, "text": text[:MAX_TEXT] + "…", "text_clipped": True}
    return side


# ---- state -------------------------------------------------------------------

def _state_ops(step_a: dict, step_b: dict) -> list[dict]:
    """What changes step_a's state into step_b's: ``{path, op, before, after}``
    with JSON Pointer paths (RFC 6901), op add | remove | replace; at most
    MAX_STATE_OPS, then one ``{"op": "truncated"}``."""
    ops: list[dict] = []
    _walk(step_a.get("state"), step_b.get("state"), "", ops)
    if len(ops) > MAX_STATE_OPS:
        ops = ops[:MAX_STATE_OPS] + [{"path": "", "op": "truncated", "before": None, "after": None}]
    return ops


def state_diff(before, after) -> list[dict]:
    """Every difference between two JSON values, as ``{path, op, before, after}``."""
    ops: list[dict] = []
    _walk(before, after, "", ops)
    return ops


def _walk(x, y, path: str, ops: list[dict]) -> None:
    if len(ops) > MAX_STATE_OPS:
        return
    if isinstance(x, dict) and isinstance(y, dict):
        for key in sorted(set(x) | set(y), key=str):
            _walk(x.get(key, ABSENT), y.get(key, ABSENT), f"{path}/{_escape(key)}", ops)
    elif isinstance(x, list) and isinstance(y, list):
        for i in range(max(len(x), len(y))):
            _walk(x[i] if i < len(x) else ABSENT, y[i] if i < len(y) else ABSENT, f"{path}/{i}", ops)
    elif x is ABSENT:
        ops.append({"path": path, "op": "add", "before": None, "after": _clip(y)})
    elif y is ABSENT:
        ops.append({"path": path, "op": "remove", "before": _clip(x), "after": None})
    elif x != y or type(x) is not type(y):
        ops.append({"path": path, "op": "replace", "before": _clip(x), "after": _clip(y)})


def _escape(key) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _clip(value):
    """A value small enough to show; a large one becomes the start of its JSON."""
    text = json.dumps(value, default=str)
    return value if len(text) <= MAX_VALUE else {"clipped": text[:MAX_VALUE] + "…"}


# ---- summaries ---------------------------------------------------------------

def _divergence(row: dict) -> dict:
    a, b, what = row["a"], row["b"], row["differs"]
    return {"iteration": row["iteration"], "what": what, "detail": _detail(a, b, what), "a": a, "b": b}


def _detail(a: dict | None, b: dict | None, what: list[str]) -> str:
    """One readable sentence about what differs first."""
    if a is None or b is None:
        return f"only {'b' if a is None else 'a'} took this step"
    if "tool_calls" in what:
        return _calls_detail(a["tool_calls"], b["tool_calls"])
    if "status" in what:
        return f"status {a['status']} vs {b['status']}"
    return f"text {_short(a['text'])} vs {_short(b['text'])}"


def _calls_detail(calls_a: list[dict], calls_b: list[dict]) -> str:
    for i in range(max(len(calls_a), len(calls_b))):
        ca = calls_a[i] if i < len(calls_a) else None
        cb = calls_b[i] if i < len(calls_b) else None
        if ca != cb:
            return f"tool call {i}: {_call(ca)} vs {_call(cb)}"
    return "tool calls differ"


def _call(call: dict | None) -> str:
    if call is None:
        return "none"
    args = json.dumps(call["args"], default=str, sort_keys=True)
    return f"{call['name']}({args if len(args) <= 80 else args[:80] + '…'}) {call['status']}"


def _short(text, n: int = 60) -> str:
    text = "" if text is None else str(text)
    return json.dumps(text if len(text) <= n else text[:n] + "…")


def _side_summary(record: dict, steps: dict[int, dict], calls: dict[int, list[dict]]) -> dict:
    """The session's outcome and totals over all its own steps."""
    snap = record.get("snapshot") or {}
    sides = [_side(steps[i], calls.get(i)) for i in sorted(steps)]
    costs = [s["cost"] for s in sides if s["cost"] is not None]
    last = sides[-1] if sides else None
    return {"session_id": snap.get("session_id"), "agent_id": snap.get("agent_id"), "name": snap.get("name"),
            "status": snap.get("status"),
            "status_reason": snap.get("status_reason"), "steps": len(sides),
            "first_iteration": min(steps) if steps else None, "last_iteration": max(steps) if steps else None,
            "tokens": sum(s["tokens"] for s in sides), "cost": sum(costs) if costs else None,
            "errors": sum(1 for s in sides if s["status"] == "error")
            + sum(1 for s in sides for c in s["tool_calls"] if c["status"] == "failed"),
            "tool_calls": sum(len(s["tool_calls"]) for s in sides),
            "final_text": _shown(last)["text"] if last else None}
