"""runtime/dispatch/questions.py and tools/ask_user.py in one process, on a real store:
posting a question is idempotent (what a restart relies on when a crash came
between the row and its messages), the root is found through parent links,
and the result shapes the model receives."""
import asyncio
from datetime import datetime, timezone

from runtime.dispatch.questions import QuestionDesk
from store import Store
from tools import ask_user


class Agent:
    """The little of a SessionAgent the desk reads."""

    def __init__(self, snapshot):
        self._snapshot = snapshot
        self.agent_id, self.session_id = snapshot["agent_id"], snapshot["session_id"]

    def snapshot(self):
        return dict(self._snapshot)


class Sessions:
    def get(self, session_id):
        return None  # nothing runs here: the desk reads parents from the store


def snapshot(session_id, agent_id, **fields):
    return {"session_id": session_id, "agent_id": agent_id, "moniker": "scripted", "status": "running",
            "iteration": 0, "config": {}, "state": {}, "created_at": datetime.now(timezone.utc), **fields}


def row(call_id, session_id, agent_id, **args):
    return {"id": call_id, "name": "ask_user", "status": "waiting_result", "agent_id": agent_id,
            "session_id": session_id, "iteration": 0, "created_at": datetime.now(timezone.utc),
            "args": {"question": "Which city?", **args}}


def test_posting_is_idempotent_and_reaches_the_root_through_the_parents(tmp_path):
    store = Store(str(tmp_path / "db"))
    root_conv = store.conversations.create(title="main")["conversation_id"]
    child_conv = store.conversations.create(title="child")["conversation_id"]
    joined_conv = store.conversations.create(title="joined")["conversation_id"]
    store.states.save(snapshot("ROOT", "RA", conversation_id=root_conv))
    store.states.save(snapshot("MID", "MA", parent_session_id="ROOT", parent_agent_id="RA"))
    store.conversations.join(joined_conv, kind="agent", agent_id="CA", session_id="CHILD")
    child = Agent(snapshot("CHILD", "CA", name="Researcher", conversation_id=child_conv,
                           parent_session_id="MID", parent_agent_id="MA"))
    posted = []

    async def on_message(message):
        posted.append(message["conversation_id"])

    desk = QuestionDesk(store, Sessions(), controls=None, on_message=on_message)
    question = row("01QUESTIONCALL0000000000000", "CHILD", "CA", choices=["Paris", "Rome"])

    async def load_twice():
        await desk.tool_phase_loaded(child, [question])  # planned
        await desk.tool_phase_loaded(child, [question])  # recovered after a restart: nothing new
    asyncio.run(load_twice())

    assert sorted(posted) == sorted([child_conv, joined_conv, root_conv])
    for conv in (child_conv, joined_conv):
        (message,) = store.conversations.transcript(conv)
        assert message["message_id"] == question["id"] and message["text"] == "Which city?"
        assert message["event_type"] == "question" and message["data"]["choices"] == ["Paris", "Rome"]
    (notice,) = store.conversations.transcript(root_conv)
    assert notice["text"] == "Researcher needs more information: Which city?"
    assert notice["data"]["root_session_id"] == "ROOT"  # through MID, to the top
    assert notice["data"]["child"] == {"agent_id": "CA", "session_id": "CHILD", "name": "Researcher"}


def test_a_parent_cycle_does_not_hang_and_a_root_posts_no_notice(tmp_path):
    store = Store(str(tmp_path / "db"))
    conv = store.conversations.create(title="loop")["conversation_id"]
    store.states.save(snapshot("A", "AA", parent_session_id="B", conversation_id=conv))
    store.states.save(snapshot("B", "BA", parent_session_id="A"))
    desk = QuestionDesk(store, Sessions(), controls=None)
    root = asyncio.run(desk._root(snapshot("A", "AA", parent_session_id="B")))
    assert root["session_id"] in ("A", "B")  # stops at the cycle
    assert asyncio.run(desk._root(snapshot("LONE", "LA"))) is None


def test_answers_choices_and_timeouts_as_the_model_sees_them():
    asked = {"id": "c", "args": {"question": "Go?", "choices": ["Yes", "No"], "timeout_s": 5, "default": "no"},
             "created_at": "2026-01-01T00:00:00Z"}
    assert ask_user.answered(asked, " yes ", answered_by="ann", via="api")["result"] == {
        "answer": " yes ", "choice": "Yes", "answered_by": "ann", "via": "api"}
    assert ask_user.answered(asked, "2", answered_by=None, via="conversation")["result"]["choice"] == "No"
    assert ask_user.answered(asked, "maybe", answered_by=None, via="api")["result"]["choice"] is None
    assert ask_user.timed_out(asked) == {"status": "success", "result": {
        "answer": "no", "choice": "No", "answered_by": None, "via": "timeout", "timed_out": True}}
    assert ask_user.deadline(asked) == datetime(2026, 1, 1, 0, 0, 5, tzinfo=timezone.utc)
    bare = {"id": "d", "args": {"question": "Anyone?", "timeout_s": 1}, "created_at": "2026-01-01T00:00:00Z"}
    out = ask_user.timed_out(bare)
    assert out["status"] == "failed" and out["error"].startswith("unanswered:")
    assert ask_user.deadline({"args": {"question": "no timeout"}, "created_at": "2026-01-01T00:00:00Z"}) is None
    assert ask_user.parse_args({"question": "  "}) is None and ask_user.parse_args({"question": "x", "y": 1}) is None


def test_a_timeout_armed_again_by_a_restart_queues_no_second_action(tmp_path):
    """Each restart arms a question's timer again; one that fires while the
    first life's time-out action still waits in the queue adds none (a loaded
    worker restarted ten times queued ten per question).  Once that action has
    been applied and the question is still open, a new one is queued."""
    store = Store(str(tmp_path / "db"))
    question = row("01QUESTIONCALL0000000000001", "S1", "A1", timeout_s=1)
    question["created_at"] = datetime(2026, 1, 1, tzinfo=timezone.utc)  # long past its deadline
    store.tool_calls.save([{**question, "seq": 0, "call_id": None, "result": None, "error": None, "attempts": 0,
                            "started_at": None, "finished_at": None, "duration_ms": None, "usage": None,
                            "decided_by": None}])

    def time_outs():
        return [a for a in store.actions.search(session_id="S1", type="answer")
                if (a.get("payload") or {}).get("timed_out")]

    for _life in range(3):  # the first life and two restarts
        desk = QuestionDesk(store, Sessions(), controls=None)
        asyncio.run(desk._expire(question, ask_user.deadline(question)))
    assert len(time_outs()) == 1
    (first,) = time_outs()
    store.actions.finish(first["id"], ok=True)  # applied (say a control that did not close it)
    asyncio.run(QuestionDesk(store, Sessions(), controls=None)._expire(question, ask_user.deadline(question)))
    assert len(time_outs()) == 2
