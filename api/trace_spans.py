"""A session's record as spans on one time axis: what the trace view draws
(``GET /api/sessions/<id>/trace``, web/static/js/pages/trace.js).

Pure functions of rows already read (steps, tool calls, child snapshots): no
store, no Flask, so the arithmetic is tested alone (tests/unit/test_trace_spans.py).

What the record says and what is derived:

- a step row is written when the step ends (``created_at``) and says how long
  it took (``latency_ms``), so its span is ``[created_at - latency_ms, created_at]``;
- its model calls (``usage.calls``) and their HTTP attempts carry durations but
  no start times: the attempts are placed one after the other from the step's
  start, each call after its wait at the rate gate (``rate_wait_ms``).  Their
  start times are derived, not recorded; a call recorded without attempts (a
  scripted step's pretend usage, rows from before attempts were kept) is one
  attempt of the call's duration;
- a tool call is made when its step ends (``created_at``).  One that waited
  for a person's approval (it waits now, a person denied it, or a person
  decided on it and the session's ``approve`` list names it) waited from then
  until it started (or was denied, or until now); it ran from ``started_at``
  to ``finished_at`` (``duration_ms`` when the runner measured it);
- a question (an ``ask_user`` call) waits for the user from ``created_at``
  until its answer ends it (``finished_at``), or until now;
- a sub-agent's session id is its ``spawn_agent`` call's id
  (tools/spawn_agent.py), which places it at the step that spawned it.

Times go out as ISO-8601 UTC strings, durations as milliseconds.
"""
from datetime import datetime, timedelta

from domain.statuses import SESSION_FINISHED, TOOL_CALL_ENDED
from store.codec import iso, parse_time

QUESTION_TOOL = "ask_user"
SPAWN_TOOL = "spawn_agent"
MAX_ERROR = 300  # characters of an error kept on a span (the step's page has the rest)


def ms_between(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round(max((end - start).total_seconds() * 1000, 0.0), 1)


def _clip(text) -> str | None:
    if not isinstance(text, str):
        return None
    return text if len(text) <= MAX_ERROR else text[:MAX_ERROR] + "…"


def _num(value, default=0):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def attempt_spans(usage, start: datetime) -> list[dict]:
    """The model attempts of a step's ``usage``, placed one after the other from
    ``start`` (derived start times: the record keeps only durations)."""
    calls = usage.get("calls") if isinstance(usage, dict) else None
    out, cursor = [], start
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        cursor += timedelta(milliseconds=_num(call.get("rate_wait_ms")))
        attempts = call.get("attempts")
        if not isinstance(attempts, list) or not attempts:
            attempts = [{"n": 1, "outcome": "ok", "duration_ms": call.get("duration_ms"),
                         "input_tokens": call.get("input_tokens"), "output_tokens": call.get("output_tokens")}]
        for attempt in attempts:
            if not isinstance(attempt, dict):
                continue
            duration = float(_num(attempt.get("duration_ms")))
            out.append({"n": int(_num(attempt.get("n"), len(out) + 1)), "outcome": str(attempt.get("outcome") or "ok"),
                        "start": iso(cursor), "duration_ms": round(duration, 1),
                        "input_tokens": int(_num(attempt.get("input_tokens"))),
                        "output_tokens": int(_num(attempt.get("output_tokens"))),
                        "structured": call.get("structured") if isinstance(call.get("structured"), str) else None,
                        "model": call.get("model") if isinstance(call.get("model"), str) else None,
                        "error": _clip(attempt.get("error"))})
            cursor += timedelta(milliseconds=duration)
    return out


def waited_for_approval(call: dict, approve=()) -> bool:
    """Whether a person had to approve the call before it could run."""
    if call.get("status") == "waiting_approval":
        return True
    return bool(call.get("decided_by")) and (call.get("status") == "denied" or call.get("name") in approve)


def call_span(call: dict, now: datetime, approve=(), children=frozenset()) -> dict:
    """One tool call: its approval wait apart from its run, a question's wait for the user, its sub-agent."""
    created, started, finished = (parse_time(call.get(k)) for k in ("created_at", "started_at", "finished_at"))
    ended = call.get("status") in TOOL_CALL_ENDED
    approval_ms = None
    if waited_for_approval(call, approve) and created is not None:
        approval_ms = ms_between(created, started or finished or (None if ended else now))
    run_ms = None
    if started is not None:
        run_ms = _num(call.get("duration_ms"), None) if finished is not None else None
        run_ms = round(run_ms, 1) if run_ms is not None else ms_between(started, finished or (None if ended else now))
    question = call.get("name") == QUESTION_TOOL
    child = None
    if call.get("name") == SPAWN_TOOL:
        result = call.get("result") if isinstance(call.get("result"), dict) else {}
        child = call["id"] if call["id"] in children else result.get("session_id")
        child = child if isinstance(child, str) else None
    return {"id": call["id"], "name": call.get("name"), "status": call.get("status"), "seq": call.get("seq"),
            "created_at": iso(created), "approval_wait_ms": approval_ms,
            "run_start": iso(started), "run_ms": run_ms, "end": iso(finished),
            "question": question,
            "user_wait_ms": ms_between(created, finished or (None if ended else now)) if question else None,
            "open": not ended, "error": _clip(call.get("error")), "child_session_id": child}


def step_span(step: dict, calls: list[dict], now: datetime, approve=(), children=frozenset()) -> dict:
    """One step: its span, its model attempts, the tool calls it made (in call order)."""
    end = parse_time(step["created_at"])
    latency = _num(step.get("latency_ms"), None)
    start = end - timedelta(milliseconds=latency) if latency is not None else end
    usage = step.get("usage") if isinstance(step.get("usage"), dict) else {}
    return {"iteration": step["iteration"], "status": step.get("status"), "start": iso(start), "end": iso(end),
            "duration_ms": round(latency, 1) if latency is not None else None,
            "input_tokens": int(_num(usage.get("input_tokens"))), "output_tokens": int(_num(usage.get("output_tokens"))),
            "error": _clip(step.get("error")),
            "attempts": attempt_spans(usage, start),
            "tool_calls": [call_span(c, now, approve, children)
                           for c in sorted(calls, key=lambda c: (c.get("seq") or 0, c["id"]))]}


def session_span(snapshot: dict, now: datetime) -> dict:
    """The session's own span: created until its last change when it is
    finished, until now while it may still change."""
    created = parse_time(snapshot.get("created_at")) or now
    finished = snapshot.get("status") in SESSION_FINISHED
    end = (parse_time(snapshot.get("updated_at")) or now) if finished else now
    return {"start": iso(created), "end": iso(end), "duration_ms": ms_between(created, end), "open": not finished}


def child_row(snapshot: dict, spawned_at: dict) -> dict:
    return {"session_id": snapshot["session_id"], "name": snapshot.get("name"), "status": snapshot.get("status"),
            "created_at": iso(parse_time(snapshot.get("created_at"))),
            "updated_at": iso(parse_time(snapshot.get("updated_at"))),
            "spawned_at_iteration": spawned_at.get(snapshot["session_id"])}


def trace(snapshot: dict, steps: list[dict], calls: list[dict], children: list[dict], spawned_at: dict,
          now: datetime) -> dict:
    """The spans of a window of steps, the session's own span and its sub-agents
    (``spawned_at``: a child's session id -> the iteration whose call spawned it)."""
    config = snapshot.get("config") if isinstance(snapshot.get("config"), dict) else {}
    approve = frozenset(t for t in config.get("approve") or [] if isinstance(t, str))
    child_ids = frozenset(c["session_id"] for c in children)
    by_step: dict[int, list[dict]] = {}
    for call in calls:
        by_step.setdefault(call["iteration"], []).append(call)
    return {"session": session_span(snapshot, now),
            "steps": [step_span(s, by_step.get(s["iteration"], []), now, approve, child_ids) for s in steps],
            "children": [child_row(c, spawned_at) for c in children]}
