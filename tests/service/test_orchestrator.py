"""The ``orchestrator`` moniker end to end: a real service, a
conversation, the real BAML client talking to the fake OpenAI-compatible
server, which takes each of the three branches: start a sub-agent, follow up
with it (reactivating it), answer directly."""
import json

from tests.fake_openai import FakeOpenAI, Reply
from tests.harness import wait_for

DECISIONS = {
    "population": {"action": "new_agent", "reply": "I asked a researcher.", "agent_name": "researcher",
                   "task": "find the population of Paris"},
    "metro": {"action": "follow_up", "reply": "I asked the researcher again.", "agent_name": "researcher",
              "task": "and the metro area?"},
    "thanks": {"action": "answer", "reply": "You are welcome."},
}


def decide(request) -> Reply:
    message = request.prompt.split("The user's new message:")[-1]
    for word, decision in DECISIONS.items():
        if word in message:
            return Reply(json.dumps(decision))
    return Reply(status=500, content="unexpected prompt")


def agent_texts(svc, cid) -> list[str]:
    messages = svc.get(f"/api/conversations/{cid}/messages", limit=1000).json()["messages"]
    return [m["text"] for m in messages if m["sender_type"] == "agent"]


def say(svc, cid, text):
    r = svc.post(f"/api/conversations/{cid}/messages", json={"text": text, "user_id": "ann"})
    assert r.status_code == 201, r.text


def test_orchestrator_starts_follows_up_and_answers(shared_service):
    svc = shared_service
    research = [{"text": "secret working notes"}, {"text": "Paris has 2.1M people", "done": True},
                {"text": "and about 11M in the metro area", "done": True}]
    with FakeOpenAI(decide) as llm:
        cid = svc.post("/api/conversations", json={"title": "orchestrated"}).json()["conversation_id"]
        made = svc.create("orchestrator", task="help the user", conversation_id=cid, config={
            "interval_s": 300, "tools": ["spawn_agent", "message_agent"],
            "llm": svc.endpoints.llm(llm, model="fake-orchestrator"),
            "sub_moniker": "scripted", "sub_config": {"interval_s": 0, "frames": research}})
        sid = made["session_id"]
        svc.wait_steps(sid, 1, timeout=90)  # the module's agents.py may still be starting

        say(svc, cid, "What is the population of Paris?")  # branch 1: a new sub-agent
        wait_for(lambda: "researcher: Paris has 2.1M people" in agent_texts(svc, cid), timeout=60,
                 what="the researcher's answer in the conversation")
        (child,) = svc.get(f"/api/sessions/{sid}/children").json()["children"]
        assert child["name"] == "researcher" and child["moniker"] == "scripted" and child["status"] == "done"

        say(svc, cid, "And the metro area?")  # branch 2: a follow-up reactivates it
        wait_for(lambda: "researcher: and about 11M in the metro area" in agent_texts(svc, cid), timeout=60,
                 what="the follow-up's answer")
        snap = svc.session(child["session_id"])
        assert snap["generation"] == 2 and [s["iteration"] for s in svc.steps(child["session_id"])] == [0, 1, 2]

        say(svc, cid, "thanks!")  # branch 3: a direct answer
        wait_for(lambda: "You are welcome." in agent_texts(svc, cid), timeout=60, what="the direct answer")
        texts = agent_texts(svc, cid)
        prompts = [r.prompt for r in llm.requests]
    assert texts.index("I asked a researcher.") < texts.index("researcher: Paris has 2.1M people") \
        < texts.index("I asked the researcher again.") < texts.index("researcher: and about 11M in the metro area") \
        < texts.index("You are welcome.")
    assert len(prompts) == 3, "one decision per user message; results need no model call"
    assert "Paris has 2.1M people" in prompts[1]  # it sees its sub-agent's result...
    assert not any("secret working notes" in p for p in prompts)  # ...never its history
    assert len(svc.get(f"/api/sessions/{sid}/children").json()["children"]) == 1
    decisions = [d["action"] for s in svc.steps(sid) for d in ((s.get("data") or {}).get("decisions") or [])]
    assert decisions == ["new_agent", "follow_up", "answer"]
    assert svc.session(sid)["status"] == "running"
    svc.control(made["agent_id"], "destroy")


def test_a_baml_agent_waiting_on_its_sub_agent_makes_no_model_call_meanwhile(shared_service):
    """``spawn_agent {wait: true}`` from the ``baml`` moniker: while the child
    works the parent's call is waiting_result and the model is not called; then
    the next prompt carries the child's result as the call's result."""
    svc = shared_service
    child = {"task": "ask and answer", "moniker": "scripted", "name": "inner", "wait": True,
             "config": {"interval_s": 0, "tools": ["human"], "frames": [
                 {"text": "asking", "tool_calls": [{"name": "human", "args": {"question": "go?"}}]},
                 {"text": "the inner answer", "done": True}]}}
    replies = [Reply(json.dumps({"step": "0", "next_step": "1", "state": {}, "done": False, "text": "delegating",
                                 "tool_calls": [{"name": "spawn_agent", "args": child}]})),
               Reply(json.dumps({"step": "1", "next_step": "2", "state": {}, "done": True, "text": "finished"}))]
    with FakeOpenAI(lambda request: replies.pop(0) if replies else Reply(status=500)) as llm:
        made = svc.create("baml", task="delegate", config={
            "interval_s": 0, "tools": ["spawn_agent", "human"],  # human: its child's, which a child needs its parent to have
            "llm": svc.endpoints.llm(llm, model="fake-parent")})
        sid = made["session_id"]
        call = wait_for(lambda: next((r for r in svc.get("/api/tool-calls", session_id=sid).json()["tool_calls"]
                                      if r["status"] == "waiting_result"), None), what="the waiting spawn call")
        inner = call["result"]["session_id"]
        human = wait_for(lambda: next((r for r in svc.get("/api/tool-calls", session_id=inner).json()["tool_calls"]
                                       if r["status"] == "waiting_result"), None), what="the child to ask")
        assert svc.session(sid)["status"] == "waiting" and svc.settled_step_count(sid) == 1
        assert len(llm.requests) == 1, "the model was called while its sub-agent worked"  # (no summary: not done)
        r = svc.post(f"/api/tool-calls/{human['id']}/result", json={"result": "go"})
        assert r.status_code == 202
        svc.wait_status(sid, "done", timeout=60)
        prompts = [q.prompt for q in llm.requests if "archive entry" not in q.prompt]  # not the record's summary
    assert len(prompts) == 2 and "the inner answer" in prompts[1]
    (row,) = svc.get("/api/tool-calls", session_id=sid).json()["tool_calls"]
    assert row["status"] == "success" and row["result"]["text"] == "the inner answer"
