"""Scorers: how an eval run grades each replay against the session it replays.

A scorer is ``Scorer(name, description, fn)`` where ``fn(source, replay,
context)`` takes two *records* (``{"snapshot", "steps", "tool_calls"}``, as in
evals/diff.py) and the run's context (``from_iteration``, the run's ``judge``
object, its ids) and returns a :class:`Score` (``value`` float or None,
``passed`` bool or None, ``detail`` dict), or a dict with those keys, or a
bare number; ``fn`` may be a coroutine function (the LLM judge is).  Scorers
are pure: they read the records, never the store.

``higher_is_better`` says which way a ``value`` improves, for telling which
sessions got better or worse between two runs (``passed`` decides first when
both runs have one).

The registry holds the built-ins below, ``llm_judge`` (evals/judge.py), and
plugins: installed packages' entry points in the group ``agentsvc.scorers``
and the modules named in ``AGENTSVC_PLUGINS`` exposing ``SCORERS``
(domain/plugin_registry.py, as for monikers and tools).
"""
import inspect
import json
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from domain.plugin_registry import PluginRegistry, UnknownName
from evals import judge
from evals.diff import first_divergence

DIVERGED = "diverged from the recording"  # how a diverging tool call's error starts (runtime/session/replay.py)


@dataclass
class Score:
    value: float | None = None
    passed: bool | None = None
    detail: dict = field(default_factory=dict)


@dataclass
class Scorer:
    name: str
    description: str
    fn: Callable[..., Any]
    higher_is_better: bool | None = None

    def describe(self) -> dict:
        return {"name": self.name, "description": self.description, "higher_is_better": self.higher_is_better}


class UnknownScorer(UnknownName):
    """No scorer of this name is registered."""


class ScorerRegistry(PluginRegistry[Scorer]):
    item_type = Scorer
    kind = "scorer"
    entry_point_group = "agentsvc.scorers"
    module_attribute = "SCORERS"
    unknown = UnknownScorer


# ---- running one ----------------------------------------------------------------

def as_score(result) -> Score:
    """What a scorer returned, as a :class:`Score`."""
    if isinstance(result, Score):
        return result
    if isinstance(result, dict):
        detail = result.get("detail")
        return Score(_number(result.get("value")), _flag(result.get("passed")),
                     detail if isinstance(detail, dict) else ({} if detail is None else {"detail": detail}))
    if isinstance(result, bool):
        return Score(float(result), result)
    if isinstance(result, (int, float)) or result is None:
        return Score(_number(result))
    raise TypeError(f"a scorer returned a {type(result).__name__}, not a Score")


async def run_scorer(scorer: Scorer, source: dict, replay: dict, context: dict) -> Score:
    """One scorer on one pair; a scorer that raises gives a null score saying why
    (one broken plugin must not stop a run)."""
    try:
        result = scorer.fn(source, replay, context)
        if inspect.isawaitable(result):
            result = await result
        return as_score(result)
    except Exception as exc:
        return Score(None, None, {"error": f"{type(exc).__name__}: {exc}"[:2000]})


def _number(value) -> float | None:
    if value is None or isinstance(value, bool):
        return None if value is None else float(value)
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None  # NaN and infinities: no score


def _flag(value) -> bool | None:
    return None if value is None else bool(value)


def summarize(values) -> dict:
    """Mean, median and count of the non-null values."""
    numbers = [v for v in values if v is not None]
    if not numbers:
        return {"mean": None, "median": None, "n": 0}
    return {"mean": statistics.fmean(numbers), "median": statistics.median(numbers), "n": len(numbers)}


def change(scorer: Scorer | None, before: dict | None, after: dict | None) -> str | None:
    """"better", "worse" or None between two scores ({value, passed}) of one session."""
    if not before or not after:
        return None
    if before.get("passed") is not None and after.get("passed") is not None and before["passed"] != after["passed"]:
        return "better" if after["passed"] else "worse"
    direction = scorer.higher_is_better if scorer else None
    a, b = before.get("value"), after.get("value")
    if direction is None or a is None or b is None or a == b:
        return None
    return "better" if (b > a) == direction else "worse"


# ---- what the built-ins read from a record ---------------------------------------

def own_steps(record: dict, context: dict) -> list[dict]:
    """The steps the run compares: from the set's ``from_iteration`` on."""
    start = int((context or {}).get("from_iteration") or 0)
    return [s for s in record.get("steps") or [] if int(s.get("iteration", 0)) >= start]


def own_calls(record: dict, context: dict) -> list[dict]:
    start = int((context or {}).get("from_iteration") or 0)
    calls = [c for c in record.get("tool_calls") or [] if int(c.get("iteration", 0)) >= start]
    return sorted(calls, key=lambda c: (int(c.get("iteration", 0)), c.get("seq") or 0))


def final_result(record: dict) -> dict:
    """The session's result ``{text, data}`` (its snapshot's, else its newest step's)."""
    result = (record.get("snapshot") or {}).get("result")
    if isinstance(result, str):
        result = _loads(result)
    if not isinstance(result, dict):
        steps = [s for s in record.get("steps") or [] if s.get("status") in ("ok", "done")]
        result = {"text": steps[-1].get("text"), "data": steps[-1].get("data")} if steps else {}
    return result


def final_json(record: dict):
    """The final answer as a JSON value: its data, else its text parsed; a missing
    or unparseable answer is :data:`NOT_JSON`."""
    result = final_result(record)
    if result.get("data") not in (None, {}, []):
        return _loads(result["data"]) if isinstance(result["data"], str) else result["data"]
    text = (result.get("text") or "").strip()
    value = _loads(text) if text else NOT_JSON
    return NOT_JSON if value is text else value


NOT_JSON = object()


def _loads(text: str):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _norm(text: str) -> str:
    return " ".join((text or "").split()).casefold()


def tokens_of(steps: list[dict]) -> int:
    return sum(int((s.get("usage") or {}).get("input_tokens") or 0) + int((s.get("usage") or {}).get("output_tokens")
                                                                          or 0) for s in steps)


def cost_of(steps: list[dict]) -> float | None:
    costs = [(s.get("usage") or {}).get("cost") for s in steps]
    priced = [c for c in costs if c is not None]
    return float(sum(priced)) if priced else None


def errors_of(record: dict, context: dict) -> int:
    """Failed steps and failed tool calls; a call that failed only because it
    diverged from the recording is a divergence, not an error."""
    steps = sum(1 for s in own_steps(record, context) if s.get("status") == "error")
    calls = sum(1 for c in own_calls(record, context) if c.get("status") in ("failed", "unknown")
                and not str(c.get("error") or "").startswith(DIVERGED))
    return steps + calls


# ---- the built-ins ----------------------------------------------------------------

def final_equal(source, replay, context) -> Score:
    a, b = judge.final_answer(source), judge.final_answer(replay)
    same = a.strip() == b.strip()
    return Score(float(same), same, {} if same else {"source": a[:500], "replay": b[:500]})


def final_contains(source, replay, context) -> Score:
    """The replay's final answer contains the recorded one (case and spacing aside)."""
    a, b = judge.final_answer(source), judge.final_answer(replay)
    found = _norm(a) in _norm(b)
    return Score(float(found), found, {} if found else {"source": a[:500], "replay": b[:500]})


def final_json_equal(source, replay, context) -> Score:
    a, b = final_json(source), final_json(replay)
    if a is NOT_JSON:
        return Score(None, None, {"error": "the recorded final answer is not JSON"})
    if b is NOT_JSON:
        return Score(0.0, False, {"error": "the replay's final answer is not JSON"})
    same = a == b
    return Score(float(same), same)


def tool_sequence_equal(source, replay, context) -> Score:
    def calls(record):
        return [(c.get("name"), _loads(c["args"]) if isinstance(c.get("args"), str) else c.get("args"))
                for c in own_calls(record, context)]
    a, b = calls(source), calls(replay)
    same = a == b
    detail = {"source_calls": len(a), "replay_calls": len(b)}
    if not same:
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        detail.update(first_difference=at, source=_call(a, at), replay=_call(b, at))
    return Score(float(same), same, detail)


def _call(calls: list, at: int) -> dict | None:
    if at >= len(calls):
        return None
    name, args = calls[at]
    return {"name": name, "args": json.dumps(args, sort_keys=True, default=str)[:300]}


def divergence_step(source, replay, context) -> Score:
    """The first iteration where the replay went elsewhere (evals/diff.py); None
    and passed when it never did."""
    found = first_divergence(source, replay)
    if found is None:
        return Score(None, True, {})
    return Score(float(found["iteration"]), False, found)


def steps(source, replay, context) -> Score:
    a, b = len(own_steps(source, context)), len(own_steps(replay, context))
    return Score(float(b), None, {"source": a, "delta": b - a})


def tokens(source, replay, context) -> Score:
    a, b = tokens_of(own_steps(source, context)), tokens_of(own_steps(replay, context))
    return Score(float(b), None, {"source": a, "delta": b - a})


def cost(source, replay, context) -> Score:
    a, b = cost_of(own_steps(source, context)), cost_of(own_steps(replay, context))
    return Score(b, None, {"source": a, "delta": None if a is None or b is None else b - a})


def errors(source, replay, context) -> Score:
    a, b = errors_of(source, context), errors_of(replay, context)
    return Score(float(b), b == 0, {"source": a, "status": (replay.get("snapshot") or {}).get("status")})


BUILTIN = (
    Scorer("final_equal", "1 when the replay's final answer equals the recorded one", final_equal, True),
    Scorer("final_contains", "1 when the replay's final answer contains the recorded one (case and spacing aside)",
           final_contains, True),
    Scorer("final_json_equal", "1 when both final answers are JSON and equal", final_json_equal, True),
    Scorer("tool_sequence_equal", "1 when the replay called the same tools with the same arguments, in order",
           tool_sequence_equal, True),
    Scorer("divergence_step", "the first iteration where the replay diverged (null: never; passed when never)",
           divergence_step, True),
    Scorer("steps", "steps the replay took (detail: the recording's, and the difference)", steps, False),
    Scorer("tokens", "input + output tokens of the replay's steps", tokens, False),
    Scorer("cost", "the replay's model cost (null when unpriced)", cost, False),
    Scorer("errors", "failed steps and tool calls of the replay (divergences aside); passed when none",
           errors, False),
    Scorer(judge.NAME, judge.DESCRIPTION, judge.llm_judge, True),
)


def builtin_registry() -> ScorerRegistry:
    registry = ScorerRegistry()
    for scorer in BUILTIN:
        registry.register(scorer)
    return registry


@lru_cache(maxsize=1)
def default_registry() -> ScorerRegistry:
    """The built-ins and the installed and named plugins (loaded once per process)."""
    registry = builtin_registry()
    registry.load_plugins()
    return registry
