"""``agentsvc replay``, ``diff`` and ``eval …`` without a service: each command is
run through click with a stand-in for cli.client.Client that records what would
be sent and answers with documents shaped like the API's.

What these prove: each command sends the body the API contract asks for (only
the overrides given, search filters under ``search``), refuses bad usage
(exit 2) before sending anything, prints a readable table or (``--json``) the
service's document unchanged, and ends with the documented exit codes
(1 for a failed run or replay action, 6 for a wait that timed out).  The
end-to-end flow against a real service is tests/service/test_cli_evals.py.
"""
import json

import pytest
from click.testing import CliRunner

from cli import options, render_evals
from cli.client import TIMEOUT, ApiFailure
from cli.main import cli

SET = {"id": "01SET", "name": "smoke", "session_ids": ["s1", "s2"], "from_iteration": 0, "search": None,
       "created_at": "2026-11-26T15:00:00.000Z"}
REQUEST = {"config": {"llm": {"model": "a"}}, "profile": None, "moniker": None, "tools": "recorded",
           "children": "served", "to_iteration": None, "scorers": ["final_equal", "llm_judge"], "concurrency": 4,
           "judge": None}
RUN_A = {"id": "01RUNA", "evalset_id": "01SET", "status": "done", "total": 2, "request": REQUEST,
         "scorers": ["final_equal", "llm_judge"], "progress": {"pending": 0, "enqueued": 0, "scored": 2, "failed": 0},
         "summary": {"final_equal": {"mean": 0.5, "median": 0.5, "n": 2, "passed": 1, "failed": 1},
                     "llm_judge": {"mean": 0.75, "median": 0.75, "n": 2, "passed": 0, "failed": 0}}}
RUN_B = {**RUN_A, "id": "01RUNB", "request": {**REQUEST, "config": {"llm": {"model": "b"}}},
         "summary": {"final_equal": {"mean": 1.0, "median": 1.0, "n": 2, "passed": 2, "failed": 0},
                     "llm_judge": {"mean": None, "median": None, "n": 0, "passed": 0, "failed": 0}}}
COMPARISON = {  # GET /api/evalsets/<id>/runs (api/routes/evals.py, api/eval_views.py)
    "evalset": SET,
    "runs": [RUN_A, RUN_B],
    "sessions": [
        {"session_id": "s1", "name": "first", "runs": {
            "01RUNA": {"replay_session_id": "r1", "status": "scored", "replay_status": "done",
                       "scores": {"final_equal": 0.0, "llm_judge": 0.5}, "passed": {"final_equal": False,
                                                                                    "llm_judge": None}},
            "01RUNB": {"replay_session_id": "r2", "status": "scored", "replay_status": "done",
                       "scores": {"final_equal": 1.0, "llm_judge": None}, "passed": {"final_equal": True}}}},
        {"session_id": "s2", "name": "second", "runs": {
            "01RUNA": {"replay_session_id": "r3", "status": "scored", "scores": {"final_equal": 1.0},
                       "passed": {"final_equal": True}}}},
    ],
    "comparisons": [{"from_run": "01RUNA", "to_run": "01RUNB", "better": ["s1"], "worse": [],
                     "changes": {"s1": {"final_equal": "better"}}}],
}
DIFF = {
    "a": {"session_id": "src", "status": "done", "steps": 3, "tokens": 120, "cost": None, "errors": 0,
          "tool_calls": 1},
    "b": {"session_id": "rep", "status": "stopped", "status_reason": "diverged", "steps": 2, "tokens": 80,
          "cost": 0.0012, "errors": 1, "tool_calls": 1},
    "iterations": [
        {"iteration": 0, "differs": [], "state": [],
         "a": {"status": "ok", "text": "looking", "tool_calls": [{"name": "demo.add", "status": "success"}]},
         "b": {"status": "ok", "text": "looking", "tool_calls": [{"name": "demo.add", "status": "success"}]}},
        {"iteration": 1, "differs": ["tool_calls"], "state": [{"path": "/n", "op": "replace"}],
         "a": {"status": "ok", "text": "adding", "tool_calls": [{"name": "demo.add", "status": "success"}]},
         "b": {"status": "ok", "text": "fetching", "tool_calls": [{"name": "http_fetch", "status": "failed"}]}},
        {"iteration": 2, "differs": ["step"], "state": [], "a": {"status": "ok", "text": "done"}, "b": None},
    ],
    "first_divergence": {"iteration": 1, "what": ["tool_calls"], "detail": "tool call 0: demo.add vs http_fetch"},
    "summary": {"compared": 3, "differing": 2, "state_differing": 1, "shared_before": 0, "truncated": False},
}


class FakeClient:
    """Records each call; answers from ``answers`` (a method name -> a value or a callable)."""

    calls: list = []
    answers: dict = {}

    def __init__(self, url=None, token=None):
        pass

    def __getattr__(self, name):
        def call(*args, **kwargs):
            FakeClient.calls.append((name, args, kwargs))
            answer = FakeClient.answers.get(name)
            if isinstance(answer, Exception):
                raise answer
            return answer(*args, **kwargs) if callable(answer) else answer
        return call


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr(options, "Client", FakeClient)
    FakeClient.calls, FakeClient.answers = [], {}
    monkeypatch.setenv("COLUMNS", "250")
    return FakeClient


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def cells(line: str) -> list[str]:
    """A table row's cells (rich separates columns with │)."""
    return [c.strip() for c in line.split("│")]


def sent(fake, name):
    return [c for c in fake.calls if c[0] == name]


# ---- eval create / list ---------------------------------------------------------------

def test_eval_create_from_sessions_or_a_search(fake):
    fake.answers["create_evalset"] = SET
    result = invoke("eval", "create", "smoke", "--session", "s1", "--session", "s2", "--from-iteration", "2")
    assert result.exit_code == 0, result.output
    assert sent(fake, "create_evalset")[0][1] == ({"name": "smoke", "session_ids": ["s1", "s2"],
                                                   "from_iteration": 2},)
    assert "01SET" in result.output and "smoke" in result.output

    result = invoke("eval", "create", "done-ones", "-q", "invoice overdue", "--moniker", "baml", "--limit", "50",
                    "--json")
    assert result.exit_code == 0, result.output
    assert sent(fake, "create_evalset")[1][1] == ({"name": "done-ones", "search": {
        "q": "invoice overdue", "moniker": "baml", "limit": 50}},)
    assert json.loads(result.output) == SET  # the service's document, unchanged


@pytest.mark.parametrize("args", [
    ["eval", "create", "x"],  # neither sessions nor a search
    ["eval", "create", "x", "--session", "s1", "-q", "words"],  # both
    ["eval", "create", "x", "--session", "s1", "--moniker", "baml"],  # a search filter without a search
    ["eval", "run", "01SET"],  # no scorer
    ["eval", "run", "01SET", "--scorer", "steps", "--tools", "sometimes"],
    ["eval", "run", "01SET", "--scorer", "steps", "--config", "[1]"],
    ["eval", "run", "01SET", "--scorer", "steps", "--judge", "not json"],
    ["eval", "run", "01SET", "--scorer", "steps", "--concurrency", "0"],
    ["diff", "s1"],  # no --against
])
def test_bad_usage_exits_2_and_sends_nothing(fake, args):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert fake.calls == []


def test_eval_list(fake):
    fake.answers["evalsets"] = {"evalsets": [SET]}
    result = invoke("eval", "list")
    assert result.exit_code == 0 and "1 eval sets" in result.output and "smoke" in result.output


# ---- eval run ----------------------------------------------------------------------

def test_eval_run_sends_only_the_overrides_given(fake):
    fake.answers["start_eval_run"] = {**RUN_A, "status": "running"}
    result = invoke("eval", "run", "01SET", "--scorer", "final_equal", "--scorer", "llm_judge",
                    "--config", '{"llm": {"model": "b"}}', "-s", "max_steps=5", "--profile", "researcher",
                    "--tools", "recorded_then_live", "--concurrency", "2", "--to-iteration", "4",
                    "--judge", '{"llm": {"model": "judge"}, "pass_threshold": 0.7}')
    assert result.exit_code == 0, result.output
    (evalset_id, body), = [c[1] for c in sent(fake, "start_eval_run")]
    assert evalset_id == "01SET"
    assert body == {"tools": "recorded_then_live", "config": {"llm": {"model": "b"}, "max_steps": 5},
                    "profile": "researcher", "scorers": ["final_equal", "llm_judge"], "to_iteration": 4, "concurrency": 2,
                    "judge": {"llm": {"model": "judge"}, "pass_threshold": 0.7}}
    assert "01RUNA" in result.output and "running" in result.output
    assert sent(fake, "wait_eval_run") == []  # no --wait: it returns at once

    invoke("eval", "run", "01SET", "--scorer", "steps")
    assert sent(fake, "start_eval_run")[1][1][1] == {"tools": "recorded", "scorers": ["steps"]}


def test_eval_run_wait_shows_the_run_and_exits_1_when_it_failed(fake):
    results = [{"source_session_id": "s1", "replay_session_id": "r1", "agent_id": "a1", "status": "scored",
                "replay_status": "done", "error": None,
                "scores": {"final_equal": {"value": 1.0, "passed": True, "detail": {}},
                           "llm_judge": {"value": None, "passed": None, "detail": {"error": "unparseable"}}}},
               {"source_session_id": "s2", "replay_session_id": "r2", "agent_id": "a2", "status": "failed",
                "replay_status": None, "error": "no recorded session s2", "scores": {}}]
    fake.answers.update(start_eval_run={**RUN_A, "status": "running"},
                        wait_eval_run={**RUN_A, "results": results})
    result = invoke("eval", "run", "01SET", "--scorer", "final_equal", "--wait", "--timeout", "5")
    assert result.exit_code == 0, result.output
    assert sent(fake, "wait_eval_run")[0][1] == ("01RUNA", 5.0)
    assert "run 01RUNA of 01SET: done (2 scored)" in result.output
    assert "0.5 / 0.5 (n=2, 1/2 passed)" in result.output
    s1 = cells(next(line for line in result.output.splitlines() if line.strip().startswith("s1")))
    assert s1 == ["s1", "r1", "scored", "done", "1 ✓", "error", ""]
    s2 = cells(next(line for line in result.output.splitlines() if line.strip().startswith("s2")))
    assert s2 == ["s2", "r2", "failed", "", "–", "–", "no recorded session s2"]

    fake.answers["wait_eval_run"] = {**RUN_A, "status": "failed", "error": "evalset has no sessions"}
    result = invoke("eval", "run", "01SET", "--scorer", "steps", "--wait")
    assert result.exit_code == 1 and "evalset has no sessions" in result.output

    fake.answers["wait_eval_run"] = ApiFailure(TIMEOUT, "timeout", "eval run 01RUNA still running after 1s")
    result = invoke("eval", "run", "01SET", "--scorer", "steps", "--wait", "--json")
    assert result.exit_code == TIMEOUT
    assert json.loads(result.output.splitlines()[0])["error"]["code"] == "timeout"


# ---- eval show --------------------------------------------------------------------------

def test_eval_show_puts_runs_side_by_side(fake):
    fake.answers.update(eval_runs=COMPARISON, evalset=SET)
    result = invoke("eval", "show", "01SET")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2 runs" in out and "01RUNA" in out and "01RUNB" in out
    assert "0.75 / 0.75 (n=2)" in out and "1 / 1 (n=2, 2/2 passed)" in out and "0.5 / 0.5 (n=2, 1/2 passed)" in out
    assert 'config={"llm": {"model": "b"}}' in out and "children" not in out
    assert "r1 final_equal" in out and "r2 llm_judge" in out
    s1 = cells(next(line for line in out.splitlines() if line.strip().startswith("s1")))
    assert s1 == ["s1", "first", "0 ✗", "0.5", "1 ✓", "–"]
    s2 = cells(next(line for line in out.splitlines() if line.strip().startswith("s2 ")))
    assert s2 == ["s2", "second", "1 ✓", "–", "–", "–"]
    assert "r1 → r2 better s1: final_equal better" in out
    assert sent(fake, "evalset") == []  # the comparison carries its set

    assert json.loads(invoke("eval", "show", "01SET", "--json").output) == COMPARISON


def test_eval_show_one_run(fake):
    fake.answers["eval_run"] = RUN_B
    result = invoke("eval", "show", "01SET", "--run", "01RUNB")
    assert result.exit_code == 0 and "run 01RUNB of 01SET" in result.output
    assert sent(fake, "eval_run")[0][1] == ("01RUNB",)


# ---- replay and diff ----------------------------------------------------------------------

def test_replay_resolves_the_id_waits_and_sends_the_overrides(fake):
    fake.answers.update(resolve={"session_id": "src", "agent_id": "a1"},
                        replay={"agent_id": "a1", "session_id": "rep", "action_id": "act", "status": "pending"},
                        wait_action={"id": "act", "status": "done"},
                        session={"session_id": "rep", "status": "stopped", "status_reason": "diverged",
                                 "replay": {"diverged_at": 3, "divergence": "tool call 0: x vs y"}})
    result = invoke("replay", "a1", "--from-iteration", "2", "--moniker", "scripted", "--until-finished")
    assert result.exit_code == 0, result.output
    assert sent(fake, "replay")[0][1] == ("src", {"tools": "recorded", "moniker": "scripted", "from_iteration": 2})
    assert "diverged" in result.output and "divergence: tool call 0: x vs y" in result.output

    fake.answers["wait_action"] = {"id": "act", "status": "failed", "error": "no step 9 in the recording"}
    result = invoke("replay", "src", "--from-iteration", "9", "--json")
    assert result.exit_code == 1
    assert json.loads(result.output)["error"] == "no step 9 in the recording"


def test_diff_marks_the_first_divergence(fake):
    fake.answers["diff"] = DIFF
    result = invoke("diff", "rep", "--against", "src")
    assert result.exit_code == 0, result.output
    assert sent(fake, "diff")[0][1:] == (("rep", "src"), {"from_iteration": None, "limit": None})
    lines = result.output.splitlines()
    first = next(line for line in lines if line.strip().startswith("1 "))
    assert "▶" in first and "demo.add:success" in first and "http_fetch:failed" in first
    assert "(no step)" in next(line for line in lines if line.strip().startswith("2 "))
    assert "first divergence at iteration 1: tool call 0: demo.add vs http_fetch" in result.output
    assert "3 iterations compared, 2 differ" in result.output

    changed = invoke("diff", "rep", "--against", "src", "--changed").output
    assert not any(line.strip().startswith("0 ") for line in changed.splitlines())


def test_cells():
    assert render_evals.number(None) == "–" and render_evals.number(2.0) == "2"
    assert render_evals.number(0.123456) == "0.123"
    assert render_evals.score_cell({"value": 0.5, "passed": False}) == "0.5 ✗"
    assert render_evals.score_cell({"value": None, "detail": {"error": "x"}}) == "error"
    assert render_evals.summary_cell({"mean": None, "median": None, "n": 0}) == "–"
    assert render_evals.overrides({}) == "(as recorded)"
