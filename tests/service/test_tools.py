"""Tool calls (StepFrame-v1) through the real service: agents.py and app.py as
subprocesses, the ``scripted`` moniker asking for tools, assertions on the
persisted rows (tool_calls, agent_steps) and on the live events."""
import threading
from datetime import datetime

import pytest
import socketio

from tests.harness import wait_for
from tests.plugins import read_count

# The fixtures ``shared_service`` and ``service`` (tests/conftest.py) give agents.py
# a directory where the counting tools record each execution (``svc.count_dir``).


def scripted(svc, frames, **config) -> dict:
    return svc.create("scripted", config={"interval_s": 0, "frames": frames, **config})


def tool_calls(svc, session_id: str) -> list[dict]:
    r = svc.get("/api/tool-calls", session_id=session_id, limit=1000)
    assert r.status_code == 200, r.text
    return r.json()["tool_calls"]


def wait_call(svc, session_id: str, seq: int, *statuses, timeout: float = 30.0) -> dict:
    def found():
        rows = [c for c in tool_calls(svc, session_id) if c["seq"] == seq]
        return rows[0] if rows and rows[0]["status"] in statuses else None
    return wait_for(found, timeout=timeout, what=f"call {seq} of {session_id} to be {statuses}")


def results_of(step: dict) -> list[dict]:
    return (step.get("inputs") or {}).get("tool_results") or []


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Watcher:
    """A python-socketio client recording the live tool_call events of some rooms."""

    def __init__(self, url: str, rooms: list[str]):
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.sio = socketio.Client(reconnection=False)
        self.sio.on("tool_call", self._record)
        self.sio.connect(url, transports=["websocket"])
        assert self.sio.call("subscribe", {"rooms": rooms}, timeout=5)["ok"]

    def _record(self, data):
        with self.lock:
            self.events.append(data)

    def statuses(self, tool_call_id: str) -> list[str]:
        with self.lock:
            return [e["data"]["status"] for e in self.events if e["id"] == tool_call_id]

    def close(self):
        self.sio.disconnect()


# ---- 1. a call runs; its result reaches the next step ------------------------

def test_a_tool_call_runs_and_its_result_reaches_the_next_step(shared_service):
    svc = shared_service
    agent_id = "tool-agent-1"
    watcher = Watcher(svc.url, [f"agent:{agent_id}"])
    try:
        made = svc.create("scripted", agent_id=agent_id, config={"interval_s": 0, "tools": ["add"], "frames": [
            {"text": "adding", "tool_calls": [{"id": "c1", "name": "add", "args": {"numbers": [1, 2, 3.5]}}]},
            {"text": "got it"}, {"text": "bye", "done": True}]})
        sid = made["session_id"]
        svc.wait_status(sid, "done")
        steps = svc.steps(sid)
        assert [s["iteration"] for s in steps] == [0, 1, 2]
        (row,) = tool_calls(svc, sid)
        assert row["status"] == "success" and row["result"] == {"sum": 6.5} and row["attempts"] == 1
        assert row["iteration"] == 0 and row["call_id"] == "c1" and row["name"] == "add"
        assert ts(row["started_at"]) <= ts(row["finished_at"]) and row["duration_ms"] >= 0
        assert steps[0]["tool_calls"] == [{"id": row["id"], "call_id": "c1", "name": "add",
                                           "args": {"numbers": [1, 2, 3.5]}}]
        assert steps[0]["status"] == "ok"
        assert results_of(steps[1]) == [{"id": "c1", "name": "add", "status": "success", "result": {"sum": 6.5},
                                         "error": None}]
        assert results_of(steps[2]) == []  # consumed once
        assert svc.get(f"/api/tool-calls/{row['id']}").json() == row
        # Live: the row's changes, in order, in the agent's room, ending with the last.  The
        # relay may coalesce a change still unsent into the newer one (runtime/base/relay.py), so
        # an earlier status can be missing, never out of order or repeated.
        wait_for(lambda: watcher.statuses(row["id"])[-1:] == ["success"], what="live tool_call events")
        seen = watcher.statuses(row["id"])
        assert seen == [s for s in ("pending", "running", "success") if s in seen], seen
    finally:
        watcher.close()


# ---- 3. concurrent calls, call order, guidance during a tool --------------------

def test_calls_of_a_step_run_concurrently_and_come_back_in_call_order(shared_service):
    svc = shared_service
    made = scripted(svc, [
        {"tool_calls": [{"name": "sleep_count", "args": {"seconds": 1.5, "key": "conc-slow"}},
                        {"name": "sleep_count", "args": {"seconds": 0.5, "key": "conc-fast"}}]},
        {"text": "both back"}, {"done": True}], tools=["sleep_count"])
    sid = made["session_id"]
    wait_call(svc, sid, 0, "running")
    # Guidance sent while the tools run reaches the next step together with the results.
    svc.control(made["agent_id"], "interrupt", guidance="hurry up")
    svc.wait_status(sid, "done")
    slow, fast = sorted(tool_calls(svc, sid), key=lambda c: c["seq"])
    # They overlapped: each started before the other finished.
    assert ts(slow["started_at"]) < ts(fast["finished_at"]) and ts(fast["started_at"]) < ts(slow["finished_at"])
    assert ts(fast["finished_at"]) < ts(slow["finished_at"])  # the fast one ended first...
    step1 = svc.steps(sid)[1]
    assert [r["id"] for r in results_of(step1)] == [slow["id"], fast["id"]]  # ...yet results keep call order
    assert [r["result"]["slept"] for r in results_of(step1)] == [1.5, 0.5]
    assert [i["text"] for i in step1["inputs"]["inbox"]] == ["hurry up"]
    assert step1["inputs"]["inbox"][0]["kind"] == "guidance"
    assert [g["text"] for g in step1["guidance"]] == ["hurry up"]
    assert read_count(svc.count_dir, "conc-slow") == 1 and read_count(svc.count_dir, "conc-fast") == 1


# ---- 4. calls that cannot run; results over the cap -----------------------------

def test_bad_calls_are_not_run_and_the_model_is_told(shared_service):
    svc = shared_service
    made = scripted(svc, [
        {"tool_calls": [{"name": "fail", "args": {}},  # installed, but not allowed here
                        {"name": "no_such_tool", "args": {}},
                        {"name": "add", "args": {"numbers": "three"}},
                        {"name": "repeat", "args": {"text": "0123456789", "times": 20000}},
                        {"name": "sleep_count", "args": {"key": "bad-args", "extra": 1}}]},
        {"text": "carried on"}, {"done": True}], tools=["add", "repeat", "no_such_tool", "sleep_count"])
    sid = made["session_id"]
    svc.wait_status(sid, "done")
    rows = sorted(tool_calls(svc, sid), key=lambda c: c["seq"])
    assert [r["status"] for r in rows] == ["denied", "failed", "failed", "success", "failed"]
    assert "not allowed" in rows[0]["error"] and rows[0]["attempts"] == 0
    assert "no tool named 'no_such_tool'" in rows[1]["error"] and rows[1]["attempts"] == 0
    assert "invalid args for 'add'" in rows[2]["error"] and "numbers" in rows[2]["error"]
    assert rows[2]["attempts"] == 0 and "JSON schema" in rows[2]["error"]
    big = rows[3]["result"]
    assert big["truncated"] is True and big["original_bytes"] > 200_000 and "truncated" in big["note"]
    assert big["text"].startswith('"0123456789') and len(big["text"]) < 70_000
    assert "extra" in rows[4]["error"] and rows[4]["attempts"] == 0
    assert read_count(svc.count_dir, "bad-args") == 0
    steps = svc.steps(sid)
    told = results_of(steps[1])
    assert [r["status"] for r in told] == ["denied", "failed", "failed", "success", "failed"]
    assert told[0]["error"] == rows[0]["error"] and steps[1]["text"] == "carried on"


# ---- 7. external results; pause, resume and destroy while waiting ---------------

def test_an_external_result_is_applied_once(shared_service):
    svc = shared_service
    made = scripted(svc, [{"tool_calls": [{"id": "q", "name": "human", "args": {"question": "how many?"}}]},
                          {"text": "thanks"}, {"done": True}], tools=["human"])
    sid = made["session_id"]
    row = wait_call(svc, sid, 0, "waiting_result")
    snap = svc.wait_status(sid, "waiting")
    assert snap["status_reason"] == "tool_result" and len(svc.steps(sid)) == 1
    assert svc.post(f"/api/tool-calls/{row['id']}/approve").status_code == 409  # nothing to approve
    assert svc.post(f"/api/tool-calls/{row['id']}/result", json={"result": 1, "error": "x"}).status_code == 400
    first = svc.post(f"/api/tool-calls/{row['id']}/result", json={"result": {"answer": 42}})
    second = svc.post(f"/api/tool-calls/{row['id']}/result", json={"result": {"answer": 43}})
    assert first.status_code == 202 and first.json()["tool_call_id"] == row["id"]
    assert svc.action(first.json()["action_id"])["status"] == "done"
    if second.status_code == 202:  # accepted before the first applied: fails cleanly when applied
        late = svc.action(second.json()["action_id"])
        assert late["status"] == "failed" and late["error"].startswith("conflict")
    else:
        assert second.status_code == 409
    assert svc.post(f"/api/tool-calls/{row['id']}/result", json={"result": 44}).status_code == 409
    svc.wait_status(sid, "done")
    steps = svc.steps(sid)
    assert results_of(steps[1]) == [{"id": "q", "name": "human", "status": "success", "result": {"answer": 42},
                                     "error": None}]
    final = svc.get(f"/api/tool-calls/{row['id']}").json()
    assert final["status"] == "success" and final["decided_by"] == first.json()["action_id"]


def test_pause_resume_and_destroy_work_on_a_waiting_session(shared_service):
    svc = shared_service
    made = scripted(svc, [{"tool_calls": [{"name": "human", "args": {"question": "?"}}]}, {"done": True}],
                    tools=["human"])
    sid, aid = made["session_id"], made["agent_id"]
    row = wait_call(svc, sid, 0, "waiting_result")
    svc.wait_status(sid, "waiting")
    assert svc.control(aid, "pause")["status"] == "done"
    assert svc.session(sid)["status"] == "paused"
    assert svc.control(aid, "resume")["status"] == "done"
    snap = svc.session(sid)
    assert snap["status"] == "waiting" and snap["status_reason"] == "tool_result"
    assert svc.control(aid, "destroy")["status"] == "done"
    assert svc.session(sid)["status"] == "stopped"
    ended = svc.get(f"/api/tool-calls/{row['id']}").json()
    assert ended["status"] == "failed" and ended["error"].startswith("cancelled")
    assert svc.post(f"/api/tool-calls/{row['id']}/result", json={"result": 1}).status_code == 409
    assert len(svc.steps(sid)) == 1


def test_tools_and_filters_are_listed(shared_service):
    svc = shared_service
    tools = {t["name"]: t for t in svc.get("/api/tools").json()["tools"]}
    assert {"wait", "human", "add", "sleep_count", "sleep_count_idempotent", "repeat", "fail"} <= set(tools)
    assert tools["add"]["args_schema"]["properties"]["numbers"]["type"] == "array"
    assert tools["human"]["external"] and tools["wait"]["idempotent"] and not tools["sleep_count"]["idempotent"]
    assert svc.get("/api/tool-calls", status="bogus").status_code == 400
    assert svc.get("/api/tool-calls/bad'id").status_code == 400
    assert svc.get("/api/tool-calls/01NOSUCHCALL").status_code == 404
    assert svc.post("/api/tool-calls/01NOSUCHCALL/approve").status_code == 404
    failed = svc.get("/api/tool-calls", status="failed", name="add").json()["tool_calls"]
    assert failed and all(c["status"] == "failed" and c["name"] == "add" for c in failed)


# ---- 5. kill -9 while tools run --------------------------------------------------

def test_a_tool_running_when_its_worker_dies_is_unknown_unless_idempotent(service):
    svc = service
    once = scripted(svc, [{"tool_calls": [{"id": "k", "name": "sleep_count", "args": {"seconds": 60, "key": "once"}}]},
                          {"text": "after"}, {"done": True}], tools=["sleep_count"])
    # Still running when the kill comes however slow the machine (it slept 2 s, and a loaded
    # run killed after it ended); its second execution, after the restart, is quick.
    again = scripted(svc, [{"tool_calls": [{"name": "sleep_count_idempotent",
                                            "args": {"seconds": 120, "then_seconds": 1, "key": "again"}}]},
                           {"done": True}], tools=["sleep_count_idempotent"])
    timer = scripted(svc, [{"tool_calls": [{"name": "wait", "args": {"seconds": 3}}]}, {"done": True}],
                     tools=["wait"])
    for made in (once, again, timer):
        wait_call(svc, made["session_id"], 0, "running")
    svc.kill_agents()
    assert read_count(svc.count_dir, "once") == 1 and read_count(svc.count_dir, "again") == 1
    svc.start_agents()

    svc.wait_status(once["session_id"], "done", timeout=60)
    (row,) = tool_calls(svc, once["session_id"])
    assert row["status"] == "unknown" and row["attempts"] == 1
    assert read_count(svc.count_dir, "once") == 1, "a non-idempotent tool ran again after the crash"
    told = results_of(svc.steps(once["session_id"])[1])
    assert told[0]["id"] == "k" and told[0]["status"] == "unknown" and "check" in told[0]["error"]

    svc.wait_status(again["session_id"], "done", timeout=60)
    (row,) = tool_calls(svc, again["session_id"])
    assert row["status"] == "success" and row["attempts"] == 2
    assert read_count(svc.count_dir, "again") == 2

    svc.wait_status(timer["session_id"], "done", timeout=60)
    (row,) = tool_calls(svc, timer["session_id"])
    assert row["status"] == "success" and row["attempts"] == 2
    # The timer woke at the time set when the call was made, not 3 s after the restart.
    assert (ts(row["result"]["until"]) - ts(row["created_at"])).total_seconds() == pytest.approx(3, abs=0.01)
    assert ts(row["result"]["woke_at"]) >= ts(row["result"]["until"])


# ---- 6. approval across restarts of both processes ------------------------------

def test_an_approval_with_edited_args_runs_them_and_a_replay_serves_it(shared_service):
    """Issue 40: a person changes a call's args before approving it.  The args
    are checked against the tool's schema first; the row keeps the model's as
    original_args; a replay matches the call by what the model asked and
    serves the outcome of the approved args."""
    svc = shared_service
    made = scripted(svc, [{"tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]}, {"text": "end", "done": True}],
                    tools=["add"], approve=["add"])
    sid = made["session_id"]
    row = wait_call(svc, sid, 0, "waiting_approval")
    refused = {"a wrong type": {"args": {"numbers": "forty-two"}}, "not an object": {"args": [40, 2]},
               "an unknown field": {"args": {"numbers": [40, 2]}, "also": 1}}
    for what, body in refused.items():
        r = svc.post(f"/api/tool-calls/{row['id']}/approve", json=body)
        assert r.status_code == 400, (what, r.text)
    r = svc.post(f"/api/tool-calls/{row['id']}/approve", json={"args": {"numbers": "forty-two"}})
    assert r.json()["error"]["code"] == "invalid_args" and "numbers" in r.json()["error"]["message"]
    assert svc.get(f"/api/tool-calls/{row['id']}").json()["status"] == "waiting_approval"  # nothing changed

    r = svc.post(f"/api/tool-calls/{row['id']}/approve", json={"args": {"numbers": [40, 2]}})
    assert r.status_code == 202 and svc.action(r.json()["action_id"])["status"] == "done"
    ran = wait_call(svc, sid, 0, "success")
    assert ran["args"] == {"numbers": [40, 2]} and ran["original_args"] == {"numbers": [1, 2]}
    assert ran["result"] == {"sum": 42}
    svc.wait_status(sid, "done")
    told = results_of(svc.steps(sid)[1])[0]
    assert told["result"] == {"sum": 42} and told["args"] == {"numbers": [40, 2]}  # the model is told what ran

    r = svc.post(f"/api/sessions/{sid}/replay", json={"config": {"interval_s": 0}})
    assert r.status_code == 202, r.text
    replay = svc.wait_status(r.json()["session_id"], "done", timeout=60)
    assert replay["replay"]["diverged_at"] is None, replay["replay"]
    [served] = tool_calls(svc, replay["session_id"])
    assert served["status"] == "replayed" and served["result"] == {"sum": 42}
    seen = results_of(svc.steps(replay["session_id"])[1])[0]
    assert {**seen, "id": None} == {**told, "id": None}  # the replay's step saw the same (its own row id)


def test_a_fetch_the_allowlist_refuses_is_never_offered_for_approval(shared_service):
    """Issue 40: approving an http_fetch to a host off the operator's allowlist was
    offered, then failed.  It now fails when planned, with the reason; the
    other call of the step (add, on the approve list too) still waits."""
    svc = shared_service
    made = scripted(svc, [{"text": "fetch and add", "tool_calls": [
        {"name": "http_fetch", "args": {"url": "http://example.com/"}},
        {"name": "add", "args": {"numbers": [1, 1]}}]}, {"text": "end", "done": True}],
        tools=["http_fetch", "add"], approve=["http_fetch", "add"])
    sid = made["session_id"]
    refused = wait_call(svc, sid, 0, "failed")
    assert "not on the operator's allowlist" in refused["error"] and refused["started_at"] is None
    waiting = wait_call(svc, sid, 1, "waiting_approval")
    listed = svc.get("/api/waiting", session_id=sid).json()["waiting"]
    assert [w["tool_call_id"] for w in listed] == [waiting["id"]]  # only the one that can run is offered
    assert listed[0]["step_text"] == "fetch and add"
    assert svc.post(f"/api/tool-calls/{waiting['id']}/approve").status_code == 202
    svc.wait_status(sid, "done")


def test_an_approval_survives_restarts_and_runs_the_tool_exactly_once(service):
    svc = service
    made = scripted(svc, [
        {"tool_calls": [{"name": "sleep_count", "args": {"seconds": 0, "key": "approved"}}]},
        {"tool_calls": [{"id": "second", "name": "sleep_count", "args": {"seconds": 0, "key": "denied"}}]},
        {"text": "end", "done": True}], tools=["sleep_count"], approve=["sleep_count"])
    sid = made["session_id"]
    row = wait_call(svc, sid, 0, "waiting_approval")
    snap = svc.wait_status(sid, "waiting")
    assert snap["status_reason"] == "approval"

    svc.stop()  # both processes
    svc.start()
    assert svc.session(sid)["status"] == "waiting"
    assert svc.get(f"/api/tool-calls/{row['id']}").json()["status"] == "waiting_approval"
    assert len(svc.steps(sid)) == 1 and read_count(svc.count_dir, "approved") == 0
    assert svc.post(f"/api/tool-calls/{row['id']}/result", json={"result": 1}).status_code == 409

    first = svc.post(f"/api/tool-calls/{row['id']}/approve")
    second = svc.post(f"/api/tool-calls/{row['id']}/approve")
    assert first.status_code == 202
    assert svc.action(first.json()["action_id"])["status"] == "done"
    if second.status_code == 202:
        late = svc.action(second.json()["action_id"])
        assert late["status"] == "failed" and late["error"].startswith("conflict")
    else:
        assert second.status_code == 409
    ran = wait_call(svc, sid, 0, "success")
    assert ran["attempts"] == 1 and ran["decided_by"] == first.json()["action_id"]
    assert svc.post(f"/api/tool-calls/{row['id']}/approve").status_code == 409

    denied = wait_for(
        lambda: [c for c in tool_calls(svc, sid) if c["iteration"] == 1 and c["status"] == "waiting_approval"],
        what="the second call to wait for approval")[0]
    r = svc.post(f"/api/tool-calls/{denied['id']}/deny", json={"reason": "not today"})
    assert r.status_code == 202 and svc.action(r.json()["action_id"])["status"] == "done"
    svc.wait_status(sid, "done")
    steps = svc.steps(sid)
    assert [s["iteration"] for s in steps] == [0, 1, 2]  # no step ran while the calls waited
    assert results_of(steps[1])[0]["status"] == "success"
    told = results_of(steps[2])[0]
    assert told["id"] == "second" and told["status"] == "denied" and "not today" in told["error"]
    assert read_count(svc.count_dir, "approved") == 1 and read_count(svc.count_dir, "denied") == 0
