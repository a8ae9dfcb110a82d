"""The eval scorers (evals/scorers.py) on hand-made records: each built-in's
value and verdict, plugins by AGENTSVC_PLUGINS, async scorers, a scorer that
raises, and the comparison of two runs."""
import asyncio

import pytest

from evals import scorers
from evals.scorers import Score, Scorer, ScorerRegistry, UnknownScorer, change, run_scorer, summarize


def step(iteration, text="", status="ok", usage=None, data=None):
    return {"iteration": iteration, "text": text, "status": status, "usage": usage, "data": data, "tool_calls": None}


def call(iteration, name, args, status="success", seq=0, error=None):
    return {"iteration": iteration, "seq": seq, "name": name, "args": args, "status": status, "error": error}


def record(steps, calls=(), result=None, status="done"):
    return {"snapshot": {"status": status, "result": result, "task": "t"}, "steps": list(steps),
            "tool_calls": list(calls)}


def score(name, source, replay, **context):
    return asyncio.run(run_scorer(scorers.builtin_registry().get(name), source, replay, context))


SOURCE = record([step(0, "thinking", usage={"input_tokens": 10, "output_tokens": 5, "cost": 0.01}),
                 step(1, "The answer is 42", status="done", usage={"input_tokens": 20, "output_tokens": 7,
                                                                   "cost": 0.02})],
                [call(0, "add", {"numbers": [40, 2]})], result={"text": "The answer is 42", "data": None})


def test_final_answer_scorers():
    same = record(SOURCE["steps"], result={"text": "The answer is 42  ", "data": None})
    longer = record(SOURCE["steps"], result={"text": "Well: the ANSWER is   42, surely", "data": None})
    other = record(SOURCE["steps"], result={"text": "no idea", "data": None})
    assert score("final_equal", SOURCE, same) == Score(1.0, True, {})
    assert score("final_equal", SOURCE, longer).passed is False
    assert score("final_contains", SOURCE, longer) == Score(1.0, True, {})
    fail = score("final_contains", SOURCE, other)
    assert (fail.value, fail.passed, fail.detail["replay"]) == (0.0, False, "no idea")


def test_final_json_equal_reads_data_then_text():
    a = record([], result={"text": "", "data": {"x": 1, "y": [1, 2]}})
    b = record([], result={"text": '{"y": [1, 2], "x": 1}', "data": None})
    c = record([], result={"text": '{"x": 2}', "data": None})
    assert score("final_json_equal", a, b) == Score(1.0, True, {})
    assert score("final_json_equal", a, c).passed is False
    not_json = score("final_json_equal", a, record([], result={"text": "hello", "data": None}))
    assert (not_json.value, not_json.passed) == (0.0, False)
    assert score("final_json_equal", record([], result={"text": "hello"}), a).value is None  # nothing to match


def test_tool_sequence_equal_compares_names_and_args_from_the_start_iteration():
    same = record([], [call(0, "add", {"numbers": [40, 2]}, status="replayed")])
    assert score("tool_sequence_equal", SOURCE, same).passed is True
    other = score("tool_sequence_equal", SOURCE, record([], [call(0, "add", {"numbers": [1]})]))
    assert (other.value, other.passed, other.detail["first_difference"]) == (0.0, False, 0)
    assert other.detail["replay"]["args"] == '{"numbers": [1]}'
    # calls before from_iteration are shared history, not compared
    assert score("tool_sequence_equal", SOURCE, record([]), from_iteration=1).passed is True


def test_divergence_step_uses_the_diff():
    same = record([step(0, "thinking"), step(1, "The answer is 42", status="done")],
                  [call(0, "add", {"numbers": [40, 2]})])
    assert score("divergence_step", SOURCE, same) == Score(None, True, {})
    elsewhere = record([step(0, "thinking"), step(1, "something else", status="done")],
                       [call(0, "add", {"numbers": [40, 2]})])
    found = score("divergence_step", SOURCE, elsewhere)
    assert (found.value, found.passed, found.detail["iteration"]) == (1.0, False, 1)


def test_counting_scorers():
    replay = record([step(0, usage={"input_tokens": 3, "output_tokens": 4, "cost": 0.5}), step(1), step(2)])
    assert score("steps", SOURCE, replay) == Score(3.0, None, {"source": 2, "delta": 1})
    assert score("tokens", SOURCE, replay) == Score(7.0, None, {"source": 42, "delta": -35})
    assert score("cost", SOURCE, replay).value == 0.5
    assert score("cost", SOURCE, record([step(0)])).value is None  # unpriced
    assert score("steps", SOURCE, replay, from_iteration=2).value == 1.0


def test_errors_leave_divergences_out():
    replay = record([step(0), step(1, status="error")],
                    [call(0, "add", {}, status="failed", error="diverged from the recording: add args differ"),
                     call(1, "fail", {}, status="failed", error="boom", seq=1)], status="error")
    result = score("errors", SOURCE, replay)
    assert (result.value, result.passed, result.detail["source"]) == (2.0, False, 0)
    assert score("errors", SOURCE, SOURCE).passed is True


def test_async_scorers_odd_returns_and_raising_scorers():
    async def judge(source, replay, context):
        await asyncio.sleep(0)
        return {"value": 0.75, "passed": True, "detail": {"why": context["judge"]}}

    def broken(source, replay, context):
        raise ValueError("nope")

    got = asyncio.run(run_scorer(Scorer("j", "", judge), SOURCE, SOURCE, {"judge": "strict"}))
    assert got == Score(0.75, True, {"why": "strict"})
    bad = asyncio.run(run_scorer(Scorer("b", "", broken), SOURCE, SOURCE, {}))
    assert bad.value is None and bad.detail["error"] == "ValueError: nope"
    assert asyncio.run(run_scorer(Scorer("n", "", lambda *a: float("nan")), SOURCE, SOURCE, {})).value is None
    assert asyncio.run(run_scorer(Scorer("t", "", lambda *a: True), SOURCE, SOURCE, {})) == Score(1.0, True, {})


def test_registry_builtins_plugins_and_unknown_names():
    registry = scorers.default_registry()  # tests/conftest.py names tests.plugins in AGENTSVC_PLUGINS
    names = set(registry.names())
    assert {"final_equal", "final_contains", "final_json_equal", "tool_sequence_equal", "divergence_step", "steps",
            "tokens", "cost", "errors", "llm_judge", "answer_length"} <= names
    with pytest.raises(UnknownScorer):
        registry.get("nosuch")
    with pytest.raises(TypeError):
        ScorerRegistry().register("not a scorer")
    plugin = asyncio.run(run_scorer(registry.get("answer_length"), SOURCE, SOURCE, {}))
    assert plugin.value == float(len("The answer is 42"))


def test_summary_and_better_or_worse():
    assert summarize([1.0, None, 3.0, 2.0]) == {"mean": 2.0, "median": 2.0, "n": 3}
    assert summarize([None]) == {"mean": None, "median": None, "n": 0}
    lower = Scorer("tokens", "", None, higher_is_better=False)
    assert change(lower, {"value": 10, "passed": None}, {"value": 5, "passed": None}) == "better"
    assert change(lower, {"value": 5, "passed": None}, {"value": 10, "passed": None}) == "worse"
    assert change(lower, {"value": 5, "passed": True}, {"value": 1, "passed": False}) == "worse"  # passed first
    assert change(Scorer("x", "", None), {"value": 1}, {"value": 2}) is None  # no direction
    assert change(lower, None, {"value": 2}) is None


def test_a_pass_turned_fail_outranks_counts_when_runs_are_compared():
    """Issue 40, item 3: a replay that diverged at step 1 took fewer steps and
    tokens and was marked better; a scorer whose pass/fail changed decides."""
    from api.eval_views import comparisons
    from evals.scorers import default_registry
    runs = [{"id": "r1", "request": {"scorers": ["final_equal", "steps", "tokens"]}},
            {"id": "r2", "request": {"scorers": ["final_equal", "steps", "tokens"]}}]
    score = lambda value, passed=None: {"value": value, "passed": passed}  # noqa: E731
    scores = {"r1": {"diverged": {"final_equal": score(1, True), "steps": score(5), "tokens": score(900)},
                     "cheaper": {"final_equal": score(1, True), "steps": score(5), "tokens": score(900)}},
              "r2": {"diverged": {"final_equal": score(0, False), "steps": score(1), "tokens": score(90)},
                     "cheaper": {"final_equal": score(1, True), "steps": score(3), "tokens": score(500)}}}
    [c] = comparisons(runs, scores, default_registry())
    assert c["worse"] == ["diverged"] and c["better"] == ["cheaper"]
    assert c["changes"]["diverged"] == {"final_equal": "worse", "steps": "better", "tokens": "better"}
