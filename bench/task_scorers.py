"""Scorers for bench/bench_tasks.py: what a task benchmark asks of a replay that
the built-in scorers (evals/scorers.py) cannot say.

Loaded as a plugin (``AGENTSVC_PLUGINS=bench.task_scorers``, in both
processes): the eval runner scores each replay with them beside
``final_contains``, and the bench reads the figures back from the run
(``GET /api/evalruns/<id>``).  Like every scorer they are pure: they read the
two records ``{snapshot, steps, tool_calls}``, never the store.

- ``task_right``: the replay's answer passes the task's own check, which the
  *source* session carries in its final state as ``_check`` (a session's
  config takes no keys of the bench's own; a replay from step 0 starts from an
  empty state, so the check never reaches the model).  A check is
  ``{"text": [regex, ...], "state": [word, ...], "calls": [tool, ...]}``: every
  pattern found in the final answer (case aside), every word in the final
  state, a call of every tool that ended ``success``.
- ``finished_by_agent``: the replay ended ``done`` by its own ``done``
  (``status_reason`` ``done``), not at ``max_steps`` or a runtime limit.
- ``right_and_finished``: both of the above.
- ``identical_repeats``: tool calls whose name and canonical args (the
  runner's ``call_key``: 2 and 2.0 are one argument) equal an earlier call of
  the same session, whether the runner served them with ``reused_from`` (the
  detail counts those) or they ran again.
- ``truncated_replies``: HTTP attempts of the model that stopped at
  ``max_tokens`` (outcome ``truncated``), of all attempts.
- ``step_times``: the replay's step latencies (ms); value the median, every
  one in the detail so the bench can take percentiles over a whole run.
"""
import json
import re
import statistics

from evals.scorers import Score, Scorer
from monikers.memory import call_key  # the runner's identity of a call: name and canonical args

NO_ANSWER = ""
CHECK_KEY = "_check"  # in a source session's state


def _loads(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def final_text(record: dict) -> str:
    """The session's final answer: its result's text (and data), else its newest step's text."""
    result = _loads((record.get("snapshot") or {}).get("result"))
    if not isinstance(result, dict) or not (result.get("text") or result.get("data") not in (None, {}, [], "")):
        said = [s for s in record.get("steps") or [] if s.get("status") in ("ok", "done") and s.get("text")]
        result = {"text": said[-1].get("text"), "data": _loads(said[-1].get("data"))} if said else {}
    parts = [str(result.get("text") or "")]
    if result.get("data") not in (None, {}, [], ""):
        parts.append(json.dumps(result["data"], sort_keys=True, default=str))
    return "\n".join(p for p in parts if p) or NO_ANSWER


def final_state(record: dict) -> dict:
    state = _loads((record.get("snapshot") or {}).get("state"))
    return {k: v for k, v in state.items() if not k.startswith("_")} if isinstance(state, dict) else {}


def check_of(source: dict) -> dict:
    state = _loads((source.get("snapshot") or {}).get("state"))
    check = state.get(CHECK_KEY) if isinstance(state, dict) else None
    return check if isinstance(check, dict) else {}


def problems(check: dict, replay: dict) -> list[str]:
    """What the replay's answer misses of ``check`` (empty: right)."""
    text, missing = final_text(replay), []
    for pattern in check.get("text") or []:
        if not re.search(pattern, text, re.IGNORECASE):
            missing.append(f"text lacks /{pattern}/")
    state = json.dumps(final_state(replay), default=str).casefold()
    missing += [f"state lacks {word!r}" for word in check.get("state") or [] if word.casefold() not in state]
    ran = {c.get("name") for c in replay.get("tool_calls") or [] if c.get("status") == "success"}
    missing += [f"no successful call of {name}" for name in check.get("calls") or [] if name not in ran]
    return missing


def finished(replay: dict) -> bool:
    snapshot = replay.get("snapshot") or {}
    return snapshot.get("status") == "done" and snapshot.get("status_reason") in (None, "done")


def task_right(source, replay, context) -> Score:
    check = check_of(source)
    if not check:
        return Score(None, None, {"error": "the source session carries no state._check"})
    missing = problems(check, replay)
    return Score(float(not missing), not missing, {"missing": missing, "answer": final_text(replay)[:300]})


def finished_by_agent(source, replay, context) -> Score:
    snapshot = replay.get("snapshot") or {}
    done = finished(replay)
    return Score(float(done), done, {"status": snapshot.get("status"), "reason": snapshot.get("status_reason")})


def right_and_finished(source, replay, context) -> Score:
    check = check_of(source)
    if not check:
        return Score(None, None, {"error": "the source session carries no state._check"})
    both = finished(replay) and not problems(check, replay)
    return Score(float(both), both)


def identical_repeats(source, replay, context) -> Score:
    seen, repeats, reused = set(), 0, 0
    calls = sorted(replay.get("tool_calls") or [], key=lambda c: (int(c.get("iteration") or 0), c.get("seq") or 0))
    for call in calls:
        key = call_key(call.get("name") or "", _loads(call.get("args")))
        result = _loads(call.get("result"))
        reused += isinstance(result, dict) and "reused_from" in result
        repeats += key in seen
        seen.add(key)
    return Score(float(repeats), repeats == 0, {"calls": len(calls), "served_with_reused_from": reused})


def attempts_of(record: dict) -> list[dict]:
    out = []
    for step in record.get("steps") or []:
        usage = _loads(step.get("usage")) or {}
        for call in (usage.get("calls") or []) if isinstance(usage, dict) else []:
            out += [a for a in call.get("attempts") or [] if isinstance(a, dict)]
    return out


def truncated_replies(source, replay, context) -> Score:
    attempts = attempts_of(replay)
    cut = sum(a.get("outcome") == "truncated" for a in attempts)
    return Score(float(cut), cut == 0, {"attempts": len(attempts), "outcomes": _count(a.get("outcome")
                                                                                      for a in attempts)})


def step_times(source, replay, context) -> Score:
    ms = [round(float(s["latency_ms"]), 1) for s in replay.get("steps") or [] if s.get("latency_ms") is not None]
    return Score(statistics.median(ms) if ms else None, None, {"ms": ms})


def _count(values) -> dict:
    out: dict = {}
    for v in values:
        out[str(v)] = out.get(str(v), 0) + 1
    return out


SCORERS = [
    Scorer("task_right", "1 when the replay's answer passes the source's state._check (text patterns, state "
           "words, successful calls)", task_right, True),
    Scorer("finished_by_agent", "1 when the replay ended done by its own done (not max_steps)", finished_by_agent,
           True),
    Scorer("right_and_finished", "1 when task_right and finished_by_agent both hold", right_and_finished, True),
    Scorer("identical_repeats", "tool calls equal (name and canonical args) to an earlier call of the replay",
           identical_repeats, False),
    Scorer("truncated_replies", "model HTTP attempts cut at max_tokens (outcome truncated)", truncated_replies,
           False),
    Scorer("step_times", "median step latency (ms); every step's in the detail", step_times, False),
]
