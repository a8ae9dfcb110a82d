"""Turns against the real service: three user messages make
three turns, each with its steps and a summary; the rows survive a kill -9 in
the middle of a turn; and the keeper rebuilds rows whose writes a crash lost."""
import asyncio
import json
import os

import pytest

from tests.fake_openai import FakeOpenAI, Received, Reply
from tests.harness import wait_for
from tests.conversation_api import ended_turns, new_conversation, post, turns_of


def summarizer(request: Received) -> Reply:
    """A model that writes turn summaries naming the last line of the transcript."""
    lines = [line for line in request.prompt.splitlines() if line.startswith("#")]
    last = lines[-1].split(" ", 1)[1] if lines else "nothing"
    return Reply(json.dumps({"summary": f"The agent said: {last}", "key_points": ["turn summarised"]}))


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAI(summarizer) as server:
        yield server


def test_three_user_messages_make_three_turns_with_steps_and_summaries(shared_service, fake):
    svc = shared_service
    cid = new_conversation(svc)
    frames = [{"text": "hello, what shall I do?"},
              {"text": "adding", "tool_calls": [{"name": "add", "args": {"numbers": [1, 2]}}]},
              {"text": "one plus two is three"},
              {"text": "the sky is blue"},
              {"text": "goodbye", "done": True}]
    config = {"frames": frames, "when_idle": "wait", "interval_s": 0, "tools": ["add"],
              "llm": svc.endpoints.llm(fake, model="summarizer")}
    created = svc.create("scripted", "answer the user", conversation_id=cid, config=config)
    sid = created["session_id"]
    svc.wait_status(sid, "waiting")
    ended_turns(svc, sid, 1)  # the create's turn: one step, then it waits for the user

    deliveries = []
    for text, status in (("add one and two", "waiting"), ("what colour is the sky?", "waiting"),
                         ("bye", "done")):
        deliveries.append(post(svc, cid, text)["deliveries"][0]["action_id"])
        before = len(svc.steps(sid))
        wait_for(lambda: len(svc.steps(sid)) > before and svc.session(sid)["status"] == status,
                 what=f"the answer to {text!r}")

    turns = ended_turns(svc, sid, 4)
    assert [t["turn"] for t in turns] == [0, 1, 2, 3]
    assert [(t["first_iteration"], t["last_iteration"], t["steps"]) for t in turns] == \
        [(0, 0, 1), (1, 2, 2), (3, 3, 1), (4, 4, 1)]
    assert turns[0]["trigger_kind"] == "create" and turns[0]["trigger_text"] == "answer the user"
    for turn, action_id, text in zip(turns[1:], deliveries, ("add one and two", "what colour is the sky?", "bye")):
        assert turn["trigger_kind"] == "message" and turn["trigger_ids"] == [action_id]  # a conversation message
        assert turn["trigger_text"] == text
    assert [t["end_reason"] for t in turns] == ["waiting:idle"] * 3 + ["done:done"]
    # Summaries by the session's model (it has an llm config), each about its own turn.
    assert all(t["summary_method"] == "llm" for t in turns), turns
    assert [t["summary"] for t in turns] == ["The agent said: hello, what shall I do?",
                                             "The agent said: one plus two is three",
                                             "The agent said: the sky is blue", "The agent said: goodbye"]
    assert turns[1]["summary_data"]["key_points"] == ["turn summarised"]
    # Usage of a turn is its steps' usage (scripted steps use none), and the steps are where the turn says.
    steps = svc.steps(sid)
    assert steps[1]["tool_calls"] and steps[2]["inputs"]["tool_results"][0]["result"] == {"sum": 3}
    assert all(t["usage"] is None for t in turns)

    newest = turns_of(svc, sid, order="newest", limit=2)
    assert newest["total"] == 4 and [t["turn"] for t in newest["turns"]] == [3, 2]
    assert [t["turn"] for t in turns_of(svc, sid, offset=3)["turns"]] == [3]


def test_without_a_model_the_summary_is_the_turns_last_text(shared_service):
    svc = shared_service
    created = svc.create("scripted", "count", config={"interval_s": 0, "frames": [
        {"text": "one"}, {"text": "two"}, {"text": "three", "done": True}]})
    turns = ended_turns(svc, created["session_id"], 1)
    # It never waited: one turn from create to done, three steps.
    assert [(t["first_iteration"], t["last_iteration"], t["steps"], t["end_reason"]) for t in turns] == \
        [(0, 2, 3, "done:done")]
    assert turns[0]["summary_method"] == "extractive" and turns[0]["summary"] == "three"


def test_the_route_validates(shared_service):
    svc = shared_service
    assert svc.get("/api/sessions/nope/turns").status_code == 404
    assert svc.get("/api/sessions/x' OR '1'='1/turns").status_code == 400
    sid = svc.create("scripted", config={"frames": [{"text": "x", "done": True}]})["session_id"]
    for params in ({"limit": 0}, {"limit": "many"}, {"order": "sideways"}, {"offset": -1}, {"colour": "red"}):
        r = svc.get(f"/api/sessions/{sid}/turns", **params)
        assert r.status_code == 400 and r.json()["error"]["code"], (params, r.text)


def test_a_turn_cut_by_kill_9_is_whole_after_recovery(service):
    svc = service
    frames = [{"text": "ready"},
              {"text": "waiting a bit", "tool_calls": [{"name": "wait", "args": {"seconds": 4}}]},
              {"text": "waited"}, {"text": "bye", "done": True}]
    sid = svc.create("scripted", config={"frames": frames, "when_idle": "wait", "interval_s": 0,
                                         "tools": ["wait"]})["session_id"]
    svc.wait_status(sid, "waiting")
    r = svc.post(f"/api/agents/{svc.session(sid)['agent_id']}/interrupt", json={"guidance": "go", "session_id": sid})
    assert r.status_code == 202
    wait_for(lambda: len(turns_of(svc, sid)["turns"]) == 2, what="the second turn to start")
    wait_for(lambda: len(svc.steps(sid)) == 2, what="the step with the wait call")
    svc.kill_agents()  # mid-turn: its tool call is still waiting
    open_turn = turns_of(svc, sid)["turns"][1]
    assert open_turn["status"] == "open" and open_turn["first_iteration"] == 1
    svc.start_agents()
    turns = ended_turns(svc, sid, 2, timeout=60)
    assert len(turns_of(svc, sid)["turns"]) == 2
    assert [(t["turn"], t["first_iteration"], t["last_iteration"], t["steps"], t["trigger_kind"]) for t in turns] \
        == [(0, 0, 0, 1, "create"), (1, 1, 2, 2, "guidance")]
    assert turns[1]["summary"] == "waited" and turns[1]["end_reason"] == "waiting:idle"

    # A session killed while it waits for input still waits after the restart: no step without input.
    svc.kill_agents()
    svc.start_agents()
    wait_for(lambda: svc.session(sid)["owner"] and "resumed" in open(
        sorted(os.path.join(svc.log_dir, f) for f in os.listdir(svc.log_dir) if f.startswith("agents"))[-1]).read(),
        timeout=60, what="the session to be resumed")
    assert svc.settled_step_count(sid, quiet_s=1.5) == 3 and svc.session(sid)["status"] == "waiting"
    r = svc.post(f"/api/agents/{svc.session(sid)['agent_id']}/interrupt", json={"guidance": "end", "session_id": sid})
    assert r.status_code == 202
    turns = ended_turns(svc, sid, 3, timeout=60)
    assert [(t["turn"], t["first_iteration"], t["last_iteration"], t["end_reason"]) for t in turns][2] == \
        (2, 3, 3, "done:done")


def test_rows_lost_to_a_crash_are_rebuilt_from_the_steps(tmp_path):
    """The keeper in this process, on a store whose turn writes were lost: a
    missing start, a missing end, and an older turn left open."""
    from runtime.record.turn_tracker import TurnKeeper
    from store import Store

    store = Store(str(tmp_path / "db"))
    sid, aid = "sess-lost", "agent-lost"

    def step(i, text, guidance=None):
        store.steps.append({"agent_id": aid, "session_id": sid, "iteration": i, "status": "ok", "text": text,
                            "guidance": guidance})

    step(0, "hello")
    step(1, "answer one", [{"action_id": "act-1", "text": "question one"}])
    step(2, "answer two", [{"action_id": "act-2", "text": "question two"}])
    # turn 0 ended and durable; turn 1 started but its end was lost; turn 2's start was lost too
    store.turns.save({"agent_id": aid, "session_id": sid, "turn": 0, "status": "ended", "first_iteration": 0,
                      "last_iteration": 0, "trigger_kind": "create", "started_at": "2026-01-01T00:00:00Z"})
    store.turns.save({"agent_id": aid, "session_id": sid, "turn": 1, "status": "open", "first_iteration": 1,
                      "trigger_kind": "guidance", "started_at": "2026-01-01T00:00:01Z"})
    snapshot = {"agent_id": aid, "session_id": sid, "moniker": "scripted", "iteration": 2, "status": "waiting",
                "status_reason": "idle", "config": {}}

    async def recover():
        keeper = TurnKeeper(store)
        await keeper.snapshot_saved(snapshot)
        await keeper.close()
    asyncio.run(recover())
    turns = store.turns.page(sid)
    # The open turn 1 swallowed iteration 2: without its end or turn 2's start, nothing tells them apart
    # (both writes lost); it ends where the session now waits, so no step is outside a turn.
    assert [(t["turn"], t["status"], t["first_iteration"], t["last_iteration"]) for t in turns] == \
        [(0, "ended", 0, 0), (1, "ended", 1, 2)]

    # A start lost on its own: the steps after the last ended turn get their turn, trigger read from its step.
    step(3, "answer three", [{"action_id": "act-3", "kind": "answer", "text": "blue"}])
    snapshot.update(iteration=3)

    async def recover_again():
        keeper = TurnKeeper(store)
        await keeper.snapshot_saved(snapshot)
        await keeper.close()
    asyncio.run(recover_again())
    turns = store.turns.page(sid)
    assert [(t["turn"], t["status"], t["first_iteration"], t["last_iteration"], t["trigger_kind"],
             t["trigger_ids"], t["summary"]) for t in turns[2:]] == \
        [(2, "ended", 3, 3, "answer", ["act-3"], "answer three")]
    store.close()
