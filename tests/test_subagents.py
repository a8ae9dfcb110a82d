"""Sub-agents through the real service (agents.py and app.py as subprocesses):
``spawn_agent`` / ``message_agent`` called by ``scripted`` sessions, and every
assertion made on persisted rows (steps' inputs, snapshots, tool calls, actions)."""
from tests.harness import wait_for


def child_spec(frames, name=None, wait=False, **config) -> dict:
    args = {"task": "help your parent", "moniker": "scripted",
            "config": {"interval_s": 0, "frames": frames, **config}, "wait": wait}
    if name:
        args["name"] = name
    return {"name": "spawn_agent", "args": args}


def parent(svc, frames, **config) -> dict:
    config = {"interval_s": 0, "tools": ["spawn_agent", "message_agent", "wait"], "frames": frames, **config}
    return svc.create("scripted", task="delegate", config=config)


def child_results(steps) -> list[tuple[int, dict]]:
    """(iteration, item) of every child_result item any step consumed."""
    return [(s["iteration"], item) for s in steps for item in (s.get("inputs") or {}).get("inbox") or []
            if item["kind"] == "child_result"]


def tool_rows(svc, session_id) -> list[dict]:
    return svc.get("/api/tool-calls", session_id=session_id, limit=1000).json()["tool_calls"]


def children_of(svc, session_id) -> list[dict]:
    r = svc.get(f"/api/sessions/{session_id}/children")
    assert r.status_code == 200, r.text
    return r.json()["children"]


def spawned_ids(svc, session_id, n=1) -> list[str]:
    """The session ids of the sub-agents a session's spawn calls started (call order)."""
    rows = wait_for(lambda: (rows := [r for r in tool_rows(svc, session_id) if r["name"] == "spawn_agent"
                                      and r["status"] in ("success", "waiting_result")]) and len(rows) >= n and rows,
                    what=f"{n} spawn calls of {session_id}")
    return [r["result"]["session_id"] for r in sorted(rows, key=lambda r: (r["iteration"], r["seq"]))]


def wait_one_result(svc, session_id, child, timeout=45):
    def found():
        got = [(i, item) for i, item in child_results(svc.steps(session_id))
               if item["data"]["child_session_id"] == child]
        return got or None
    return wait_for(found, timeout=timeout, what=f"child {child}'s result in a step of {session_id}")


# ---- 1. the outcome reaches a stepping, a paused and a finished parent once ----

def test_child_result_reaches_a_stepping_parent_once(shared_service):
    svc = shared_service
    made = parent(svc, [{"text": "spawning", "tool_calls": [
        child_spec([{"text": "the answer is 42", "done": True}], name="solver")]}]
        + [{"text": f"working {i}"} for i in range(60)] + [{"text": "bye", "done": True}], interval_s=0.1)
    sid = made["session_id"]
    (child,) = spawned_ids(svc, sid)
    svc.wait_status(child, "done")
    got = wait_one_result(svc, sid, child)
    svc.wait_status(sid, "done", timeout=60)
    got = [(i, item) for i, item in child_results(svc.steps(sid)) if item["data"]["child_session_id"] == child]
    assert len(got) == 1, got
    iteration, item = got[0]
    assert iteration >= 2  # a later step than the one that spawned it
    assert item["data"]["status"] == "done" and item["data"]["text"] == "the answer is 42"
    assert item["data"]["name"] == "solver" and item["source"]["session_id"] == child
    assert "the answer is 42" in item["text"]
    snap = svc.session(child)
    assert snap["parent_session_id"] == sid and snap["parent_agent_id"] == made["agent_id"]
    assert snap["root_session_id"] == sid and snap["reported_generation"] == 1
    assert [c["session_id"] for c in children_of(svc, sid)] == [child]
