"""``agentsvc replay``, ``diff`` and ``eval create|run|show`` as a subprocess
against the real service, with recorded ``scripted`` sessions and the LLM
judge answered by tests/fake_openai.py.

What these prove: a replay made from the command line is a replay of its
source (recorded tool results served, the same answer), its diff shows no
divergence, and one with changed frames stops diverged with the divergence
marked; an eval set made from session ids is run with built-in scorers and
``llm_judge`` to the end with ``--wait``, the judge's verdict is a score and
its unparseable reply a null score with the error, never a failed run; ``eval
show`` puts the run in a table; errors end with the documented exit codes.
"""
import json

from tests.fake_openai import FakeOpenAI, Received, Reply
from tests.service.test_cli import run, run_json


def frames(i: int, answer: str | None = None) -> list[dict]:
    return [{"text": f"adding for cli case {i}", "tool_calls": [{"name": "add", "args": {"numbers": [i, 1]}}]},
            {"text": answer or f"the answer is {i + 1}", "done": True}]


def recorded(svc, i: int) -> str:
    made = svc.create("scripted", f"cli case {i}", config={"interval_s": 0, "tools": ["add"], "frames": frames(i)})
    svc.wait_status(made["session_id"], "done", timeout=60)
    return made["session_id"]


def judge(request: Received) -> Reply:
    """A verdict for case 0, prose (unparseable) for any other."""
    if "cli case 0" in request.prompt:
        return Reply(json.dumps({"reason": "same number", "better": "tie", "score": 0.9}))
    return Reply("Both answers look fine to me.")


def test_replay_and_diff_from_the_command_line(shared_service):
    svc = shared_service
    source = recorded(svc, 0)

    same = run_json(svc, "replay", source, "--until-finished")
    assert same["status"] == "done" and same["session"]["status"] == "done", same
    replay_id = same["session_id"]
    assert svc.session(replay_id)["replayed_from"] == {"session_id": source, "from_iteration": 0}
    found = run_json(svc, "diff", replay_id, "--against", source)
    assert found["first_divergence"] is None and found["summary"]["differing"] == 0
    assert "no divergence" in run(svc, "diff", replay_id, "--against", source).stdout

    other = run_json(svc, "replay", source, "--config", json.dumps({"frames": frames(5)}), "--until-finished")
    assert other["session"]["status"] == "stopped" and other["session"]["status_reason"] == "diverged", other
    table = run(svc, "replay", source, "--config", json.dumps({"frames": frames(5)}), "--until-finished").stdout
    assert "diverged" in table
    shown = run(svc, "diff", other["session_id"], "--against", source, "--changed").stdout
    line = next(line for line in shown.splitlines() if "▶" in line)
    assert line.split("│")[0].strip() == "0" and "tool_calls" in line
    assert "first divergence at iteration 0" in shown

    assert run(svc, "replay", "no-such-session", code=3).stderr
    assert "agentsvc:" in run(svc, "diff", replay_id, "--against", "no-such-session", code=3).stderr


def test_eval_create_run_show_with_the_llm_judge(shared_service):
    svc = shared_service
    sessions = [recorded(svc, i) for i in range(2)]
    with FakeOpenAI(judge) as llm:
        made = run_json(svc, "eval", "create", "cli pair", *[a for s in sessions for a in ("--session", s)])
        assert made["session_ids"] == sessions and made["name"] == "cli pair"
        settings = {"llm": svc.endpoints.llm(llm, model="judge-model", max_reasks=0),
                    "pass_threshold": 0.5}
        finished = run_json(svc, "eval", "run", made["id"], "--scorer", "final_equal", "--scorer", "llm_judge",
                            "--judge", json.dumps(settings), "--concurrency", "2", "--wait", "--timeout", "120")
        assert len(llm.requests) == 2 and all(r.model == "judge-model" for r in llm.requests)
    assert finished["status"] == "done" and finished["progress"]["scored"] == 2, finished
    scores = {r["source_session_id"]: r["scores"] for r in finished["results"]}
    assert scores[sessions[0]]["final_equal"]["passed"] is True
    verdict = scores[sessions[0]]["llm_judge"]
    assert verdict["value"] == 0.9 and verdict["passed"] is True and verdict["detail"]["better"] == "tie"
    failed = scores[sessions[1]]["llm_judge"]
    assert failed["value"] is None and failed["detail"]["error"].startswith("unparseable judge reply")
    assert finished["summary"]["llm_judge"]["n"] == 1

    shown = run(svc, "eval", "show", made["id"]).stdout
    assert "cli pair" in shown and finished["id"] in shown and "r1 llm_judge" in shown
    row = next(line for line in shown.splitlines() if line.strip().startswith(sessions[1]))
    assert [c.strip() for c in row.split("│")][2:] == ["1 ✓", "–"]  # final_equal passed, the judge gave nothing
    one = run(svc, "eval", "show", made["id"], "--run", finished["id"]).stdout
    assert f"run {finished['id']} of {made['id']}: done (2 scored)" in one and "error" in one
    assert run_json(svc, "eval", "list")["evalsets"][0]["id"] == made["id"]

    assert "scorer" in run(svc, "eval", "run", made["id"], "--scorer", "nope", code=4).stderr  # refused, exit 4
    assert run(svc, "eval", "show", "01NOSUCHSET0000000000000000", code=3).stderr
