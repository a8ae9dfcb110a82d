"""The priority inbox against the real service.

While a scripted agent's step waits on two external tool calls, a user
message arrives, then one tool result, then a child's result, then the other
tool result; agents.py is killed with SIGKILL twice in between.  The next
frame_in must hold the tool results (in call order) and the inbox ordered
child result -> user message, and every item must be consumed by exactly
one step.

The child result is injected as an ``inbox_item`` action (kind
``child_result``) appended to the queue through the store: the internal
action type that parts of the service use to hand a session an item
(runtime/dispatch/handlers.py); it is not offered over HTTP.
"""
from store import Store
from tests.harness import wait_for

FRAMES = [
    {"text": "asking two humans", "tool_calls": [{"name": "human", "args": {"question": "a?"}},
                                                 {"name": "human", "args": {"question": "b?"}}]},
    {"text": "read everything"},
    {"text": "finished", "done": True},
]


def enqueue_inbox_item(svc, made: dict, kind: str, text: str, data=None) -> str:
    store = Store(svc.data_dir + "/lancedb")
    try:
        action = store.actions.enqueue("inbox_item", agent_id=made["agent_id"], session_id=made["session_id"],
                                       payload={"kind": kind, "text": text, "data": data,
                                                "source": {"kind": kind, "test": True}})
    finally:
        store.close()
    return action["id"]


def test_next_frame_in_orders_tool_then_child_then_user_and_consumes_each_once_across_kill_9(service):
    svc = service
    conversation = svc.post("/api/conversations", json={"title": "inbox"}).json()["conversation_id"]
    made = svc.create("scripted", conversation_id=conversation,
                      config={"interval_s": 0, "tools": ["human"], "frames": FRAMES})
    sid = made["session_id"]
    calls = wait_for(lambda: (c := svc.get("/api/tool-calls", session_id=sid).json()["tool_calls"])
                     and len(c) == 2 and all(x["status"] == "waiting_result" for x in c) and c,
                     what="two calls waiting for their results")
    calls.sort(key=lambda c: c["seq"])

    # 1. a user message in the session's conversation
    posted = svc.post(f"/api/conversations/{conversation}/messages", json={"text": "user says hi"}).json()
    message_action = posted["deliveries"][0]["action_id"]
    assert svc.action(message_action)["status"] == "done"
    # 2. the first tool result
    r = svc.post(f"/api/tool-calls/{calls[0]['id']}/result", json={"result": {"answer": "A"}})
    assert r.status_code == 202, r.text
    assert svc.action(r.json()["action_id"])["status"] == "done"
    svc.kill_agents()
    svc.start_agents()
    # 3. a child's result
    child_action = enqueue_inbox_item(svc, made, "child_result", "the child finished: 42", {"result": 42})
    assert svc.action(child_action, timeout=60)["status"] == "done"
    svc.kill_agents()
    svc.start_agents()
    assert svc.steps(sid)[-1]["iteration"] == 0, "no step may run while a call still waits"
    # 4. the last tool result lets the next step run
    r = svc.post(f"/api/tool-calls/{calls[1]['id']}/result", json={"result": {"answer": "B"}})
    assert svc.action(r.json()["action_id"], timeout=60)["status"] == "done"
    done = svc.wait_status(sid, "done", "error", timeout=60)
    assert done["status"] == "done", done

    steps = svc.steps(sid)
    assert [s["iteration"] for s in steps] == [0, 1, 2]
    consumer = steps[1]
    assert [(t["name"], t["status"], t["result"]) for t in consumer["inputs"]["tool_results"]] == [
        ("human", "success", {"answer": "A"}), ("human", "success", {"answer": "B"})]
    assert [(i["kind"], i["text"]) for i in consumer["inputs"]["inbox"]] == [
        ("child_result", "the child finished: 42"), ("message", "user says hi")]
    assert consumer["inputs"]["inbox"][0]["data"] == {"result": 42}
    assert consumer["inputs"]["inbox"][1]["source"]["conversation_id"] == conversation
    # each item consumed by exactly one step, none left over; tool results only once
    for action_id in (child_action, message_action):
        used = [s["iteration"] for s in steps for g in (s.get("guidance") or []) if g["action_id"] == action_id]
        assert used == [1], (action_id, used)
    assert not done.get("pending_guidance")
    assert not (steps[2].get("inputs") or {}).get("tool_results")
    # a redelivered item (the same action applied again) is refused: delivering the child's
    # action a second time would need a second action row, so the guard is the used-id list
    assert child_action in done["used_guidance"] and message_action in done["used_guidance"]
