"""The trace's spans (api/trace_spans.py) from hand-made rows: a step's span
from its end and latency, its attempts placed one after the other, a tool
call's approval wait apart from its run, a question's wait for the user, a
sub-agent placed at the step that spawned it, and open spans running to now."""
from datetime import datetime, timedelta, timezone

from api.trace_spans import attempt_spans, call_span, session_span, trace, waited_for_approval
from store.codec import iso

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
NOW = T0 + timedelta(minutes=10)


def at(seconds: float) -> str:
    return iso(T0 + timedelta(seconds=seconds))


def step(iteration, end_s, latency_ms, usage=None, status="ok", error=None):
    return {"id": f"s{iteration}", "iteration": iteration, "created_at": at(end_s), "latency_ms": latency_ms,
            "status": status, "error": error, "usage": usage}


def call(id_, name="add", status="success", iteration=0, seq=0, created=10.0, started=None, finished=None,
         duration_ms=None, decided_by=None, result=None):
    return {"id": id_, "name": name, "status": status, "iteration": iteration, "seq": seq, "created_at": at(created),
            "started_at": at(started) if started is not None else None,
            "finished_at": at(finished) if finished is not None else None, "duration_ms": duration_ms,
            "decided_by": decided_by, "result": result, "error": None}


def test_a_step_spans_its_latency_back_from_when_it_was_recorded():
    out = trace({"status": "done", "created_at": at(0), "updated_at": at(20)}, [step(0, 10, 2500)], [], [], {}, NOW)
    (s,) = out["steps"]
    assert (s["start"], s["end"], s["duration_ms"]) == (at(7.5), at(10), 2500)
    assert s["attempts"] == [] and s["tool_calls"] == []


def test_attempts_follow_each_other_from_the_step_start_after_the_rate_wait():
    usage = {"calls": [
        {"model": "m", "structured": "json_schema", "rate_wait_ms": 100, "attempts": [
            {"n": 1, "outcome": "timeout", "duration_ms": 1000, "input_tokens": 50, "output_tokens": 0,
             "error": "x" * 1000},
            {"n": 2, "outcome": "ok", "duration_ms": 400, "input_tokens": 50, "output_tokens": 20}]},
        {"model": "scripted", "input_tokens": 3, "output_tokens": 4, "duration_ms": 0}]}  # no attempts: one
    got = attempt_spans(usage, T0)
    assert [(a["n"], a["outcome"], a["start"], a["duration_ms"]) for a in got] == [
        (1, "timeout", at(0.1), 1000), (2, "ok", at(1.1), 400), (1, "ok", at(1.5), 0)]
    assert [a["structured"] for a in got] == ["json_schema", "json_schema", None]
    assert (got[1]["input_tokens"], got[1]["output_tokens"]) == (50, 20)
    assert (got[2]["input_tokens"], got[2]["output_tokens"], got[2]["model"]) == (3, 4, "scripted")
    assert len(got[0]["error"]) < 400  # clipped


def test_usage_of_any_odd_shape_gives_no_attempts_rather_than_an_error():
    for usage in (None, {}, {"calls": None}, {"calls": "x"}, {"calls": [None, {"attempts": [None]}]}):
        attempt_spans(usage, T0)


def test_an_approved_call_waits_apart_from_its_run():
    row = call("c1", created=10, started=70, finished=72, duration_ms=1900, decided_by="act1")
    span = call_span(row, NOW, approve={"add"})
    assert span["approval_wait_ms"] == 60_000 and span["run_start"] == at(70) and span["run_ms"] == 1900
    assert not span["question"] and span["user_wait_ms"] is None and not span["open"]
    # without approval: no wait, even when something decided it (a posted result)
    free = call_span(call("c2", created=10, started=10.5, finished=11, decided_by="act2"), NOW)
    assert free["approval_wait_ms"] is None and free["run_ms"] == 500


def test_a_call_still_waiting_for_approval_waits_until_now_and_a_denied_one_until_it_was_denied():
    waiting = call_span(call("c1", status="waiting_approval", created=0), NOW)
    assert waiting["approval_wait_ms"] == 600_000 and waiting["open"] and waiting["run_start"] is None
    denied = call_span(call("c2", status="denied", created=0, finished=30, decided_by="act"), NOW)
    assert denied["approval_wait_ms"] == 30_000 and denied["run_ms"] is None
    refused = call("c3", status="denied", created=0, finished=0)  # not allowed: denied at once, nobody asked
    assert not waited_for_approval(refused) and call_span(refused, NOW)["approval_wait_ms"] is None


def test_a_question_waits_for_the_user_until_answered_or_until_now():
    answered = call_span(call("q1", name="ask_user", created=5, finished=65, decided_by="answer"), NOW)
    assert answered["question"] and answered["user_wait_ms"] == 60_000 and answered["approval_wait_ms"] is None
    asking = call_span(call("q2", name="ask_user", status="waiting_result", created=0), NOW)
    assert asking["user_wait_ms"] == 600_000 and asking["open"]


def test_a_running_call_runs_until_now():
    span = call_span(call("c1", status="running", created=0, started=1), NOW)
    assert span["run_ms"] == 599_000 and span["open"]


def test_sub_agents_link_from_their_spawn_call_and_are_placed_at_its_step():
    spawn = call("child1", name="spawn_agent", iteration=1, result={"session_id": "child1", "queued": True})
    failed = call("nochild", name="spawn_agent", status="failed", iteration=1, seq=1)
    children = [{"session_id": "child1", "name": "helper", "status": "done", "created_at": at(11),
                 "updated_at": at(30)}]
    out = trace({"status": "running", "created_at": at(0), "updated_at": at(12), "config": {"approve": []}},
                [step(0, 5, 100), step(1, 10, 100)], [failed, spawn], children, {"child1": 1}, NOW)
    calls = out["steps"][1]["tool_calls"]
    assert [c["id"] for c in calls] == ["child1", "nochild"]  # call order
    assert [c["child_session_id"] for c in calls] == ["child1", None]
    assert out["steps"][0]["tool_calls"] == []
    assert out["children"] == [{"session_id": "child1", "name": "helper", "status": "done", "created_at": at(11),
                                "updated_at": at(30), "spawned_at_iteration": 1}]


def test_the_session_span_ends_at_its_last_change_once_finished_else_now():
    assert session_span({"status": "done", "created_at": at(0), "updated_at": at(42)}, NOW) == {
        "start": at(0), "end": at(42), "duration_ms": 42_000, "open": False}
    running = session_span({"status": "waiting", "created_at": at(0), "updated_at": at(42)}, NOW)
    assert running["end"] == iso(NOW) and running["open"]


def test_the_session_s_approve_list_decides_which_decided_calls_waited_for_approval():
    rows = [call("c1", created=0, started=30, finished=31, decided_by="a")]
    approved = trace({"status": "done", "created_at": at(0), "updated_at": at(40), "config": {"approve": ["add"]}},
                     [step(0, 0, 10)], rows, [], {}, NOW)
    assert approved["steps"][0]["tool_calls"][0]["approval_wait_ms"] == 30_000
    other = trace({"status": "done", "created_at": at(0), "updated_at": at(40), "config": {"approve": ["x"]}},
                  [step(0, 0, 10)], rows, [], {}, NOW)
    assert other["steps"][0]["tool_calls"][0]["approval_wait_ms"] is None
