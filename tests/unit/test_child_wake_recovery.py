"""A parent that finished while its children's results came in is woken, also
when a crash came between its end and its wake (runtime/child_sessions.py
``wake_left_done``, run by the adoption at start).

The runner saves a session's end, then wakes it when children's results are
waiting in its inbox (``wake_for_children``); a finished session is not
adopted again, so a kill in between left the parent done with the results
unread for good.  The store here is as such a kill leaves it."""
from datetime import datetime, timezone

import pytest

from store import Store
from tests.harness import run_in_process, until

ITEM = {"action_id": "child:kid:1", "kind": "child_result", "text": "Sub-agent kid finished: 42",
        "data": {"child_session_id": "kid", "generation": 1, "status": "done", "text": "42"},
        "source": {"kind": "child", "session_id": "kid", "generation": 1}}


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def test_a_parent_left_done_with_a_child_result_is_woken_at_start(store):
    now = datetime.now(timezone.utc)
    frames = [{"text": "started a child"}, {"text": "nothing left to do", "done": True},
              {"text": "read the child's result", "done": True}]
    for i, frame in enumerate(frames[:2]):
        store.steps.append({"agent_id": "a", "session_id": "p", "iteration": i, "step_token": str(i),
                            "next_step_token": str(i + 1), "status": "done" if frame.get("done") else "ok",
                            "text": frame["text"], "state": {"_scripted": i + 1}})
    store.states.save({"session_id": "p", "agent_id": "a", "moniker": "scripted", "task": "delegate",
                       "config": {"interval_s": 0, "frames": frames}, "status": "done", "status_reason": "done",
                       "iteration": 1, "step_token": "1", "next_step_token": "2", "state": {"_scripted": 2},
                       "pending_guidance": [ITEM], "owner": "a-dead-worker", "created_at": now,
                       "updated_at": now})

    async def scenario(service):
        await until(lambda: store.steps.count("p") >= 3 and store.states.get("p")["status"] == "done",
                    timeout=60, what="the parent to wake and read its child's result")

    run_in_process(store, scenario)
    steps = store.steps.search(session_id="p")
    assert [s["iteration"] for s in steps] == [0, 1, 2]
    assert [g["action_id"] for g in steps[2]["guidance"]] == ["child:kid:1"]
    snapshot = store.states.get("p")
    assert snapshot["pending_guidance"] == [] and "child:kid:1" in snapshot["used_guidance"]
