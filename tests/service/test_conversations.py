"""Conversations against the real service: routes and their errors, agents
posting their steps, and user messages reaching every participant session
through the action queue — none dropped, also between two steps or while paused."""
import time

from tests.harness import wait_for
from tests.conversation_api import new_conversation, post


def transcript(svc, cid: str, **params) -> list[dict]:
    r = svc.get(f"/api/conversations/{cid}/messages", **params)
    assert r.status_code == 200, r.text
    return r.json()["messages"]


def guidance_after(svc, sid: str, first_iteration: int) -> list[dict]:
    return [g for s in svc.steps(sid) if s["iteration"] >= first_iteration for g in (s["guidance"] or [])]


def test_routes_validate_and_page_with_a_cursor(shared_service):
    svc = shared_service
    cid = new_conversation(svc, tags=["a", "b"], conversation_id="conv-routes")
    again = svc.post("/api/conversations", json={"conversation_id": "conv-routes", "title": "other"})
    assert again.status_code == 200 and again.json()["existing"] is True and again.json()["title"] == "test"
    assert cid in [c["conversation_id"] for c in svc.get("/api/conversations").json()["conversations"]]
    assert svc.get(f"/api/conversations/{cid}").json()["tags"] == ["a", "b"]

    errors = {
        "unknown conversation": (svc.get("/api/conversations/nope"), 404),
        "hostile id": (svc.get("/api/conversations/x' OR '1'='1/messages"), 400),
        "blank text": (svc.post(f"/api/conversations/{cid}/messages", json={"text": "  "}), 400),
        "text too long": (svc.post(f"/api/conversations/{cid}/messages", json={"text": "x" * 20_001}), 400),
        "unknown field": (svc.post(f"/api/conversations/{cid}/messages", json={"text": "hi", "x": 1}), 400),
        "unknown cursor": (svc.get(f"/api/conversations/{cid}/messages", after="01ZZZ"), 404),
        "limit cap": (svc.get(f"/api/conversations/{cid}/messages", limit=1001), 400),
        "agent without session": (svc.post(f"/api/conversations/{cid}/participants", json={"kind": "agent"}), 400),
        "unknown session": (svc.post(f"/api/conversations/{cid}/participants",
                                     json={"kind": "agent", "session_id": "nosuch"}), 409),
        "create in unknown conversation": (svc.post("/api/agents", json={"moniker": "echo",
                                                                          "conversation_id": "nosuch"}), 404),
    }
    for what, (response, status) in errors.items():
        assert response.status_code == status, (what, response.text)
        assert set(response.json()["error"]) == {"code", "message"}, what

    joined = svc.post(f"/api/conversations/{cid}/participants", json={"kind": "user", "user_id": "ann"})
    assert joined.status_code == 201 and joined.json()["kind"] == "user"
    svc.post(f"/api/conversations/{cid}/participants", json={"kind": "user", "user_id": "ann"})
    assert len(svc.get(f"/api/conversations/{cid}/participants").json()["participants"]) == 1

    posted = [post(svc, cid, f"m{i}", user_id="ann") for i in range(7)]
    assert all(p["deliveries"] == [] for p in posted)  # no agents in it
    ids = [p["message"]["message_id"] for p in posted]
    assert [m["message_id"] for m in transcript(svc, cid)] == ids
    assert [m["text"] for m in transcript(svc, cid, after=ids[2], limit=3)] == ["m3", "m4", "m5"]
    assert transcript(svc, cid, after=ids[-1]) == []
    assert all(m["sender_type"] == "user" and m["user_id"] == "ann" for m in transcript(svc, cid))


def test_agent_steps_are_posted_and_user_messages_delivered(shared_service):
    svc = shared_service
    cid = new_conversation(svc)
    made = svc.create("echo", conversation_id=cid, config={"interval_s": 0.1})
    sid = made["session_id"]
    members = svc.get(f"/api/conversations/{cid}/participants").json()["participants"]
    assert [(m["kind"], m["session_id"]) for m in members] == [("agent", sid)]

    svc.wait_steps(sid, 2)
    sent = post(svc, cid, "hello agent")
    assert [d["session_id"] for d in sent["deliveries"]] == [sid]
    assert svc.action(sent["deliveries"][0]["action_id"])["status"] == "done"
    reply = wait_for(lambda: [m for m in transcript(svc, cid) if m["sender_type"] == "agent"
                              and m["text"] == "hello agent"], what="the agent's reply")[0]
    assert reply["agent_id"] == made["agent_id"] and reply["session_id"] == sid
    step = [s for s in svc.steps(sid) if s["iteration"] == reply["iteration"]][0]
    assert (reply["step_token"], reply["next_step_token"]) == (step["step_token"], step["next_step_token"])
    source = step["guidance"][0]["source"]
    assert source == {"conversation_id": cid, "message_id": sent["message"]["message_id"], "sender": "user"}
    agent_messages = [m for m in transcript(svc, cid) if m["sender_type"] == "agent"]
    assert [m["iteration"] for m in agent_messages] == sorted(m["iteration"] for m in agent_messages)
    svc.control(made["agent_id"], "destroy")


def test_several_messages_between_two_steps_all_arrive_in_order(shared_service):
    svc = shared_service
    cid = new_conversation(svc)
    made = svc.create("echo", conversation_id=cid, config={"interval_s": 1.0})
    sid = made["session_id"]
    first = svc.wait_steps(sid, 1)[-1]["iteration"] + 1
    texts = [f"burst {i}" for i in range(5)]
    sent = [post(svc, cid, t)["message"]["message_id"] for t in texts]
    received = wait_for(lambda: len(g := guidance_after(svc, sid, first)) >= 5 and g, timeout=90,
                        what="all five messages as guidance")
    assert [g["text"] for g in received] == texts, "a message was dropped, duplicated or reordered"
    assert [g["source"]["message_id"] for g in received] == sent
    svc.control(made["agent_id"], "destroy")


def test_messages_posted_while_paused_arrive_on_resume(shared_service):
    svc = shared_service
    cid = new_conversation(svc)
    made = svc.create("echo", conversation_id=cid, config={"interval_s": 0.1})
    sid, aid = made["session_id"], made["agent_id"]
    svc.wait_steps(sid, 2)
    assert svc.control(aid, "pause")["status"] == "done"
    paused_at = svc.settled_step_count(sid)
    for text in ("while paused 1", "while paused 2"):
        for delivery in post(svc, cid, text)["deliveries"]:
            assert svc.action(delivery["action_id"])["status"] == "done"
    time.sleep(0.5)
    assert len(svc.steps(sid)) == paused_at, "a paused session took a step"
    assert svc.control(aid, "resume")["status"] == "done"
    steps = svc.wait_steps(sid, paused_at + 2)
    resumed = steps[paused_at]
    assert [g["text"] for g in resumed["guidance"]] == ["while paused 1", "while paused 2"]
    assert resumed["text"] == "while paused 1\nwhile paused 2"
    assert all(s["guidance"] is None for s in steps[paused_at + 1:])
    svc.control(aid, "destroy")


def test_a_session_that_joins_later_hears_and_posts(shared_service):
    svc = shared_service
    cid = new_conversation(svc)
    made = svc.create("echo", config={"interval_s": 0.1})
    sid = made["session_id"]
    svc.wait_steps(sid, 1)
    r = svc.post(f"/api/conversations/{cid}/participants", json={"kind": "agent", "session_id": sid})
    assert r.status_code == 201 and r.json()["agent_id"] == made["agent_id"]
    post(svc, cid, "welcome")
    wait_for(lambda: any(m["sender_type"] == "agent" and m["text"] == "welcome" for m in transcript(svc, cid)),
             timeout=15, what="the late joiner to post its reply")
    svc.control(made["agent_id"], "destroy")


def test_a_session_exports_its_whole_record_as_json_lines(shared_service):
    """GET /api/sessions/<id>/export (issue 40, item 6): the session, every step
    (past a page of the export's reads), every tool call and its conversation's
    messages, as the list routes show them, one JSON object a line."""
    import json
    svc = shared_service
    cid = new_conversation(svc)
    frames = [{"text": "adding", "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]}] + [
        {"text": f"step {i}"} for i in range(1, 600)] + [{"text": "over", "done": True}]
    made = svc.create("scripted", conversation_id=cid, config={"interval_s": 0, "tools": ["add"], "frames": frames})
    sid = made["session_id"]
    svc.wait_status(sid, "done", timeout=240)
    post(svc, cid, "a note from the user")

    r = svc.http.get(f"{svc.url}/api/sessions/{sid}/export", timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/x-ndjson")
    assert f'filename="session-{sid}.jsonl"' in r.headers["Content-Disposition"]
    lines = [json.loads(line) for line in r.text.splitlines()]
    kinds = [line["kind"] for line in lines]
    assert kinds[0] == "session" and lines[0]["row"]["session_id"] == sid
    steps = [line["row"] for line in lines if line["kind"] == "step"]
    assert [s["iteration"] for s in steps] == list(range(601))  # past a page of 500: in order, none twice
    assert steps == svc.steps(sid)
    calls = [line["row"] for line in lines if line["kind"] == "tool_call"]
    assert [(c["name"], c["status"], c["result"]) for c in calls] == [("add", "success", {"sum": 3})]
    messages = [line["row"] for line in lines if line["kind"] == "message"]
    assert messages == transcript(svc, cid, limit=1000) and "a note from the user" in [m["text"] for m in messages]
    assert kinds == sorted(kinds, key=["session", "step", "tool_call", "message"].index)  # grouped, in this order

    assert svc.http.get(f"{svc.url}/api/sessions/01NOSUCHSESSION0000000000/export", timeout=30).status_code == 404
    assert svc.http.get(f"{svc.url}/api/sessions/x' OR '1'='1/export", timeout=30).status_code == 400
