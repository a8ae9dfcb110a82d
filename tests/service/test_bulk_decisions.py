"""Approve all and deny all (issue 40, What must hold 3): ``POST /api/tool-calls/bulk``
through the real service, asserting on the persisted calls and actions."""
from tests.harness import wait_for


def waiting_approval(svc, session_ids) -> list[dict]:
    rows = []
    for sid in session_ids:
        rows += svc.get("/api/waiting", session_id=sid, kind="approval").json()["waiting"]
    return rows


def session_waiting_for(svc, tool: str, args: dict) -> str:
    made = svc.create("scripted", config={"interval_s": 0, "tools": [tool], "approve": [tool], "frames": [
        {"text": f"use {tool}", "tool_calls": [{"name": tool, "args": args}]}, {"text": "end", "done": True}]})
    return made["session_id"]


def test_approve_all_of_a_tool_then_deny_the_rest_with_a_reason(shared_service):
    svc = shared_service
    adds = [session_waiting_for(svc, "add", {"numbers": [n, 1]}) for n in (1, 2)]
    repeat = session_waiting_for(svc, "repeat", {"text": "x", "times": 2})
    mine = [*adds, repeat]
    wait_for(lambda: len(waiting_approval(svc, mine)) == 3, timeout=60, what="three calls waiting for approval")

    # the preview: what a filter matches, per tool, and nothing queued
    only_mine = lambda: {"tool": "add", "ids": [w["tool_call_id"] for w in waiting_approval(svc, mine)]}
    r = svc.post("/api/tool-calls/bulk", json={"filter": only_mine(), "decision": "approve", "dry_run": True})
    assert r.status_code == 200, r.text
    preview = r.json()
    assert preview["matched"] == 2 and preview["tools"] == {"add": 2}
    assert {c["session_id"] for c in preview["calls"]} == set(adds)
    assert svc.get("/api/waiting", tool="add", kind="approval").json()["total"] >= 2
    assert len(waiting_approval(svc, mine)) == 3  # a preview decides nothing

    r = svc.post("/api/tool-calls/bulk", json={"filter": only_mine(), "decision": "approve"})
    assert r.status_code == 202, r.text
    made = r.json()
    assert made["matched"] == 2 and made["remaining"] == 0 and len(made["actions"]) == 2
    assert {svc.action(a["action_id"])["status"] for a in made["actions"]} == {"done"}
    for sid, n in zip(adds, (1, 2)):
        svc.wait_status(sid, "done")
        [call] = svc.get("/api/tool-calls", session_id=sid).json()["tool_calls"]
        assert call["status"] == "success" and call["result"] == {"sum": n + 1}
    [left] = waiting_approval(svc, mine)
    assert left["session_id"] == repeat  # the other tool's call was not touched

    r = svc.post("/api/tool-calls/bulk", json={"filter": {"ids": [left["tool_call_id"]]}, "decision": "deny",
                                               "reason": "not today"})
    assert r.status_code == 202, r.text
    [denied_action] = r.json()["actions"]
    assert svc.action(denied_action["action_id"])["status"] == "done"
    svc.wait_status(repeat, "done")
    [call] = svc.get("/api/tool-calls", session_id=repeat).json()["tool_calls"]
    assert call["status"] == "denied" and "not today" in (call["error"] or "")

    # nothing waits now: a second decision over the same call queues nothing
    assert waiting_approval(svc, mine) == []
    r = svc.post("/api/tool-calls/bulk", json={"filter": {"ids": [left["tool_call_id"]]}, "decision": "deny"})
    assert r.status_code == 202 and r.json() == {"matched": 0, "remaining": 0, "actions": []}


def test_bad_bulk_decisions_are_refused(shared_service):
    svc = shared_service
    bad = {
        "no filter": {"decision": "approve"},
        "an unknown decision": {"filter": {}, "decision": "maybe"},
        "a reason with approve": {"filter": {}, "decision": "approve", "reason": "why"},
        "a tool name that is no name": {"filter": {"tool": "add' OR '1'='1"}, "decision": "deny"},
        "an unknown filter": {"filter": {"status": "running"}, "decision": "deny"},
        "too many ids": {"filter": {"ids": [f"ID{n}" for n in range(501)]}, "decision": "deny"},
    }
    for what, body in bad.items():
        r = svc.post("/api/tool-calls/bulk", json=body)
        assert r.status_code == 400, (what, r.status_code, r.text)
