"""The ``orchestrator`` moniker end to end (seed 004): a real service, a
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
            "llm": {"base_url": llm.base_url, "model": "fake-orchestrator"},
            "sub_moniker": "scripted", "sub_config": {"interval_s": 0, "frames": research}})
        sid = made["session_id"]
        svc.wait_steps(sid, 1)

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
