"""The "step was interrupted" note is not lost (runtime/session/agent.py ``reconcile``).

When a worker dies during a long step, the next worker records the step as
``interrupted`` and queues a note telling the model.  Issue 37: the
interrupted row landed, the worker was killed before the snapshot carrying
the note was saved, and folding the row in on the next restart did not add
the note again, so no later step was told."""
from datetime import datetime, timezone

import pytest

from runtime.session.agent import SessionAgent
from store import Store
from tests.harness import run_in_process, until

IN_FLIGHT = datetime(2026, 11, 27, 10, 0, tzinfo=timezone.utc)


def snapshot(iteration: int = 4) -> dict:
    return {"session_id": "s", "agent_id": "a", "moniker": "joke", "task": "cats", "iteration": iteration,
            "status": "running", "config": {"interval_s": 0.01}, "step_token": str(iteration),
            "next_step_token": str(iteration + 1), "state": {"subject": "cats", "told": iteration + 1},
            "step_started_at": IN_FLIGHT, "pending_guidance": [], "used_guidance": [],
            "created_at": IN_FLIGHT}


def notes(snap: dict) -> list[str]:
    return [g["action_id"] for g in snap.get("pending_guidance") or [] if g.get("kind") == "interrupted_step"]


def test_folding_a_recorded_interrupted_step_queues_its_note_once():
    snap = snapshot()
    fixed, interrupted = SessionAgent.reconcile(snap, [])
    assert notes(fixed) == ["interrupted-s-5"]
    # Killed here: the interrupted row landed, the snapshot with the note did not.
    again, none = SessionAgent.reconcile(snap, [interrupted])
    assert none is None, "the interrupted step was recorded twice"
    assert again["iteration"] == 5 and notes(again) == ["interrupted-s-5"]
    # Saved with the note and restarted: still one note.
    assert notes(SessionAgent.reconcile(again, [interrupted])[0]) == ["interrupted-s-5"]
    # A later step used it: it is not queued again.
    note = again["pending_guidance"][0]
    used = {"iteration": 6, "status": "ok", "step_token": "5", "next_step_token": "6", "state": {},
            "guidance": [note]}
    later, _ = SessionAgent.reconcile(snap, [interrupted, used])
    assert notes(later) == [] and "interrupted-s-5" in later["used_guidance"]


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def test_the_step_after_an_interrupted_one_is_told_after_a_second_restart(store):
    """The store as the kill left it: steps 0..4, the snapshot at 4 with a step
    in flight, and step 5 recorded interrupted with no snapshot after it."""
    snap = snapshot()
    store.states.save(snap)
    for i in range(5):
        store.steps.append({"agent_id": "a", "session_id": "s", "iteration": i, "step_token": str(i),
                            "next_step_token": str(i + 1), "status": "ok",
                            "state": {"subject": "cats", "told": i + 1}})
    _, interrupted = SessionAgent.reconcile(snap, [])
    store.steps.append(interrupted)

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 8, what="steps after the restart")

    run_in_process(store, scenario)
    steps = store.steps.search(session_id="s")
    assert [s["iteration"] for s in steps] == list(range(len(steps)))
    assert steps[5]["status"] == "interrupted"
    told = [g for g in steps[6].get("guidance") or [] if g.get("kind") == "interrupted_step"]
    assert [g["action_id"] for g in told] == ["interrupted-s-5"], steps[6]
    assert not any(g.get("kind") == "interrupted_step" for s in steps[7:] for g in s.get("guidance") or [])
