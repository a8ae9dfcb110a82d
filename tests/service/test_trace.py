"""``GET /api/sessions/<id>/trace`` through the real service (agents.py and
app.py as subprocesses, the ``scripted`` moniker): a session whose first step
has model usage, a call that waits for approval and a sub-agent, and whose
second step asks the user.  The spans say what the record says: the approval
wait apart from the run, the question's wait for the user (open while it
waits, to now), the child at the step that spawned it; windows page both
ways; unknown and malformed ids and limits are refused."""
from datetime import datetime

from tests.harness import wait_for


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def trace(svc, session_id: str, **params) -> dict:
    r = svc.get(f"/api/sessions/{session_id}/trace", **params)
    assert r.status_code == 200, r.text
    return r.json()


def calls_of(out: dict) -> dict[str, dict]:
    return {c["name"]: c for s in out["steps"] for c in s["tool_calls"]}


FRAMES = [
    {"text": "starting", "usage": {"input_tokens": 11, "output_tokens": 7},
     "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}},
                    {"name": "spawn_agent", "args": {"task": "quick", "moniker": "scripted", "name": "helper",
                                                     "config": {"interval_s": 0,
                                                                "frames": [{"text": "child done", "done": True}]}}}]},
    {"text": "asking", "tool_calls": [{"name": "ask_user", "args": {"question": "Which city?"}}]},
    {"text": "bye", "done": True}]


def test_the_trace_shows_approval_waits_questions_and_sub_agents_and_pages_by_windows(shared_service):
    svc = shared_service
    made = svc.create("scripted", name="traced", config={
        "interval_s": 0, "tools": ["add", "spawn_agent", "ask_user"], "approve": ["add"], "frames": FRAMES})
    sid = made["session_id"]

    # While the call waits for approval, its wait grows to now and nothing has run.
    def waiting_a_while():
        add = calls_of(trace(svc, sid)).get("add")
        return add if add and add["status"] == "waiting_approval" and add["approval_wait_ms"] >= 300 else None
    waiting = wait_for(waiting_a_while, timeout=120, what="the add call to wait for approval a while")
    assert waiting["open"] and waiting["run_start"] is None and waiting["run_ms"] is None

    assert svc.post(f"/api/tool-calls/{waiting['id']}/approve").status_code == 202

    # The question waits for the user, open, to now.
    def asking():
        q = calls_of(trace(svc, sid)).get("ask_user")
        return q if q and q["status"] == "waiting_result" else None
    question = wait_for(asking, timeout=120, what="the question to be asked")
    assert question["question"] and question["open"] and question["user_wait_ms"] >= 0
    r = svc.post(f"/api/sessions/{sid}/answer", json={"text": "Rome"})
    assert r.status_code in (200, 202), r.text
    svc.wait_status(sid, "done", timeout=120)

    out = trace(svc, sid)
    assert (out["session_id"], out["agent_id"], out["name"], out["status"]) == (sid, made["agent_id"], "traced",
                                                                                "done")
    assert [s["iteration"] for s in out["steps"]] == [0, 1, 2]
    assert (out["first_iteration"], out["last_iteration"], out["from_iteration"], out["limit"]) == (0, 2, 0, 200)
    assert out["earlier"] is None and out["later"] is None and not out["session"]["open"]
    first, second = out["steps"][0], out["steps"][1]
    for s in out["steps"]:
        assert ts(s["start"]) <= ts(s["end"]) and s["duration_ms"] is not None
        assert ts(out["session"]["start"]) <= ts(s["end"]) <= ts(out["session"]["end"])
    (attempt,) = first["attempts"]  # the scripted step's pretend usage: one attempt
    assert (attempt["input_tokens"], attempt["output_tokens"], attempt["outcome"]) == (11, 7, "ok")
    assert ts(attempt["start"]) == ts(first["start"])

    add, spawn = first["tool_calls"]
    assert add["name"] == "add" and add["status"] == "success" and not add["open"]
    assert add["approval_wait_ms"] >= 300
    assert ts(add["run_start"]) >= ts(add["created_at"]) and add["run_ms"] is not None
    assert abs((ts(add["run_start"]) - ts(add["created_at"])).total_seconds() * 1000 - add["approval_wait_ms"]) < 1
    assert spawn["name"] == "spawn_agent" and spawn["approval_wait_ms"] is None
    child = spawn["child_session_id"]
    assert child and out["children"] and out["children"][0]["session_id"] == child
    assert out["children"][0]["name"] == "helper" and out["children"][0]["spawned_at_iteration"] == 0

    (q,) = second["tool_calls"]
    assert q["question"] and not q["open"] and q["user_wait_ms"] > 0 and q["approval_wait_ms"] is None

    # The child's own trace: its step, no children, its parent's trace is elsewhere.
    svc.wait_status(child, "done", timeout=120)
    mine = trace(svc, child)
    assert [s["iteration"] for s in mine["steps"]] == [0] and mine["children"] == []

    # Windows: two steps, then the rest, each pointing at the other.
    head = trace(svc, sid, limit=2)
    assert [s["iteration"] for s in head["steps"]] == [0, 1] and head["later"] == 2 and head["earlier"] is None
    tail = trace(svc, sid, from_iteration=2, limit=2)
    assert [s["iteration"] for s in tail["steps"]] == [2] and tail["earlier"] == 0 and tail["later"] is None
    assert trace(svc, sid, from_iteration=50)["steps"] == []


def test_unknown_and_malformed_ids_and_limits_are_refused(shared_service):
    svc = shared_service
    assert svc.get("/api/sessions/01NOSUCHSESSION/trace").status_code == 404
    assert svc.get("/api/sessions/bad id!/trace").status_code == 400
    made = svc.create("scripted", config={"interval_s": 0, "frames": [{"text": "one", "done": True}]})
    for params in ({"limit": 0}, {"limit": 501}, {"from_iteration": -1}, {"limit": "many"}, {"other": 1}):
        r = svc.get(f"/api/sessions/{made['session_id']}/trace", **params)
        assert r.status_code == 400, (params, r.text)
    assert trace(svc, made["session_id"], limit=500)["limit"] == 500
    operation = svc.get("/api/openapi.json").json()["paths"]["/api/sessions/{session_id}/trace"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"session_id", "from_iteration", "limit"}
    assert {"200", "400", "404"} <= set(operation["responses"])
