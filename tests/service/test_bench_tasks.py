"""bench/bench_tasks.py without a model, so its code cannot rot unnoticed: its
sources recorded through the API (guidance and an answer included), frozen as
an eval set, replayed by one eval run with the ``scripted`` moniker (each
replay plays its source's frames again), scored by the eval runner with the
bench's plugin scorers, and the live ``ask_user`` task answered and scored in
the bench's process.  And the scorers on hand-made records: each fails where
a model goes wrong (a wrong answer, ``max_steps``, a repeated call, a reply
cut at ``max_tokens``)."""
import pytest

from bench import bench_tasks, task_scorers
from tests.harness import Service

pytestmark = pytest.mark.timeout(600)

TASKS = "france,checklist,wait,jokes,ask"


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-tasks")
    (root / "logs").mkdir()
    service = Service(str(root / "data"), str(root / "logs"), env={"AGENTSVC_PLUGINS": bench_tasks.PLUGIN})
    try:
        service.start()
        yield service
    finally:
        service.stop()


def test_the_bench_records_replays_and_scores_its_tasks(svc):
    args = bench_tasks.parse_args(["--moniker", "scripted", "--tasks", TASKS, "--run-timeout-s", "300"])
    result = bench_tasks.run_bench(svc, args.task_list, args.modes, args)

    mode = result["modes"]["scripted"]
    assert mode["eval_run_status"] == "done"
    rows = mode["tasks"]
    assert list(rows) == TASKS.split(",")
    assert rows["ask"]["how"] == "live" and all(r["how"] == "replay" for t, r in rows.items() if t != "ask")
    for task, row in rows.items():  # a replay of a right source is right, finished, and makes no repeats
        assert row["status"] == "scored", (task, row)
        assert row["finished"] and row["right"] and row["right_and_finished"] and row["final_contains"], (task, row)
        assert row["identical_repeats"] == 0 and row["truncated"] == 0 and row["steps"] >= 1, (task, row)
        assert len(row["step_ms"]) == row["steps"], (task, row)
    assert rows["jokes"]["steps"] == 2  # the recorded guidance was delivered at step 1, as recorded
    total = mode["total"]
    assert total["finished_rate"] == total["right_and_finished_rate"] == 1.0
    assert total["targets_met"] == {"finished_rate": True, "right_and_finished_rate": True,
                                    "identical_repeats": True, "truncated_rate": True}
    jokes = svc.steps(result["sources"]["jokes"])
    assert jokes[1]["guidance"] and "dog joke" in jokes[1]["guidance"][0]["text"]


# ---- the scorers on hand-made records ---------------------------------------------

SOURCE = {"snapshot": {"state": {"_check": {"text": [r"\bparis\b"], "state": ["eggs"], "calls": ["wait"]}}}}


def record(status="done", reason="done", text="It is Paris.", state=None, calls=(), attempts=()):
    steps = [{"iteration": 0, "status": "done", "text": text, "latency_ms": 1200.0,
              "usage": {"calls": [{"attempts": [{"outcome": o} for o in attempts]}]}}]
    return {"snapshot": {"status": status, "status_reason": reason, "result": {"text": text, "data": None},
                         "state": state if state is not None else {"list": ["eggs"]}},
            "steps": steps, "tool_calls": list(calls)}


def call(name, args, iteration, result=None, status="success"):
    return {"name": name, "args": args, "iteration": iteration, "seq": 0, "status": status, "result": result}


def score(name, source, replay):
    scorer = next(s for s in task_scorers.SCORERS if s.name == name)
    return scorer.fn(source, replay, {})


def test_a_right_finished_replay_passes_every_check():
    replay = record(calls=[call("wait", {"seconds": 2}, 0)], attempts=["ok"])
    for name in ("task_right", "finished_by_agent", "right_and_finished", "identical_repeats", "truncated_replies"):
        assert score(name, SOURCE, replay).passed is True, name
    assert score("step_times", SOURCE, replay).value == 1200.0


def test_each_way_of_going_wrong_is_counted():
    failed_call = call("wait", {}, 0, status="failed")
    wrong = score("task_right", SOURCE, record(text="It is Rome.", state={}, calls=[failed_call]))
    assert wrong.passed is False and len(wrong.detail["missing"]) == 3, wrong.detail
    cut_off = record(reason="max_steps")
    assert score("finished_by_agent", SOURCE, cut_off).passed is False
    assert score("right_and_finished", SOURCE, cut_off).passed is False
    assert score("task_right", SOURCE, cut_off).passed is False  # no successful wait call
    repeated = record(calls=[call("wait", {"seconds": 2}, 0), call("wait", {"seconds": 2.0}, 1,
                                                                      result={"reused_from": "x", "note": "n"}),
                             call("wait", {"seconds": 2}, 2)])
    repeats = score("identical_repeats", SOURCE, repeated)
    assert repeats.value == 2 and repeats.passed is False and repeats.detail["served_with_reused_from"] == 1
    truncated = score("truncated_replies", SOURCE, record(attempts=["truncated", "ok"]))
    assert truncated.value == 1 and truncated.detail["attempts"] == 2 and truncated.passed is False
    assert score("task_right", {"snapshot": {}}, record()).passed is None  # no check: no verdict
