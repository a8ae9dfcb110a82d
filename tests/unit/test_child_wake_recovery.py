"""A parent that finished while its children's results came in is woken, also
when a crash came between its end and its wake (runtime/session/child_sessions.py
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


SECOND = {**ITEM, "action_id": "child:kid2:1", "text": "Sub-agent kid2 finished: 43",
          "data": {**ITEM["data"], "child_session_id": "kid2", "text": "43"},
          "source": {"kind": "child", "session_id": "kid2", "generation": 1}}


def test_the_recovery_scan_and_a_child_result_for_the_same_parent_run_it_once(store):
    """The scan's wake goes through the parent's lane: a ``child_result`` for the
    same parent, applied while the scan runs (a later adoption round runs it
    beside the dispatcher), comes before or after it, never beside it.  Woken
    directly by the scan (not through the queue), the scan and the handler could
    each make a runner for the parent: the kill loop saw an iteration written
    twice and a child's result reach the model twice."""
    now = datetime.now(timezone.utc)
    frames = [{"text": "started two children"}, {"text": "nothing left to do", "done": True},
              {"text": "read a child's result", "done": True}, {"text": "read the other", "done": True}]
    payload = {"key": SECOND["action_id"], "generation": 1, "child_agent_id": "k2", "child_session_id": "kid2",
               "name": None, "status": "done", "status_reason": "done", "text": "43", "data": None,
               "last_error": None, "usage": None, "iteration": 0, "wait_call": None}

    def both_read():
        snap = store.states.get("p")
        used = set((snap or {}).get("used_guidance") or [])
        return snap and snap["status"] == "done" and {"child:kid:1", "child:kid2:1"} <= used

    async def scenario(service):
        await until(lambda: service.ready, timeout=60, what="the worker to poll")
        for i, frame in enumerate(frames[:2]):  # what a kill left, as another worker's, found by a later round
            store.steps.append({"agent_id": "a", "session_id": "p", "iteration": i, "step_token": str(i),
                                "next_step_token": str(i + 1), "status": "done" if frame.get("done") else "ok",
                                "text": frame["text"], "state": {"_scripted": i + 1}})
        store.states.save({"session_id": "p", "agent_id": "a", "moniker": "scripted", "task": "delegate",
                           "config": {"interval_s": 0, "frames": frames}, "status": "done",
                           "status_reason": "done", "iteration": 1, "step_token": "1", "next_step_token": "2",
                           "state": {"_scripted": 2}, "pending_guidance": [ITEM], "owner": "a-dead-worker",
                           "created_at": now, "updated_at": now})
        store.actions.enqueue("child_result", agent_id="a", session_id="p", payload=payload)
        service._scanned = False  # the next round scans, beside the dispatcher applying the child_result
        await service.adopt()
        await until(both_read, timeout=60, what="the parent to wake and read both children's results")
        await until(lambda: all(a["status"] in ("done", "failed") for a in store.actions.search(session_id="p")),
                    timeout=60, what="every action of the parent to finish")

    run_in_process(store, scenario)
    steps = store.steps.search(session_id="p")
    iterations = [s["iteration"] for s in steps]
    assert iterations == list(range(len(iterations))), iterations  # none written twice
    read = [g["action_id"] for s in steps for g in s.get("guidance") or []]
    assert sorted(read) == ["child:kid2:1", "child:kid:1"], read  # each result reached a step once
    assert all(a["status"] == "done" for a in store.actions.search(session_id="p")), \
        [(a["type"], a["status"], a.get("error")) for a in store.actions.search(session_id="p")]
