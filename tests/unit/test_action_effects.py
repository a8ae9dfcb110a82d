"""An action applied again after it took effect ends done (runtime/dispatch/handlers.py,
runtime/dispatch/actions.py ``took_effect``), also when its session has finished since,
and also when its attempts ran out: parking asks first.

Issue 37 saw answers, approvals, destroys, resumes and guidance reported
``failed`` although their effect was recorded.  A crash between an action's
effect and its finish is made here by setting the finished action back to
pending with its attempt recorded, as ``release_claims_of`` leaves it once its
worker died."""
import pytest
from ulid import ULID

from store import Store, codec, filters
from tests.harness import finished, run_in_process, until


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()



def run(store, scenario):
    return run_in_process(store, scenario, watch_s=0.01)


def again(store: Store, action_id: str, record: str = "", attempts: int = 1) -> None:
    """The action as a crash between its effect and its finish leaves it, once
    its claim is handed back: pending, never finished, its attempts recorded."""
    store.writer.update("actions", filters.eq_id("id", action_id), {
        "status": "pending", "processed": False, "processed_at": None, "claimed_by": None, "lease_until": None,
        "attempts": attempts, "error": record or "started by w-dead at 2026-11-27T10:00:00.000000000\n"})


def test_controls_applied_again_after_their_session_finished_end_done(store):
    """A resume and an interrupt took effect (the session used the guidance and
    ran to its end); their worker died before finishing them.  Applied again,
    they recognise their own effect: done, not "cannot resume: session is done"."""
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "countdown", "config": {"interval_s": 0.05, "n": 10}})
    ids = {}

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 1, what="a first step")
        ids["pause"] = store.actions.enqueue("pause", agent_id="a", session_id="s")["id"]
        await until(lambda: finished(store, ids["pause"]), what="paused")
        ids["interrupt"] = store.actions.enqueue("interrupt", agent_id="a", session_id="s",
                                                 payload={"guidance": "count faster"})["id"]
        ids["inbox"] = store.actions.enqueue("inbox_item", agent_id="a", session_id="s",
                                             payload={"kind": "system", "text": "a note"})["id"]
        ids["resume"] = store.actions.enqueue("resume", agent_id="a", session_id="s")["id"]
        await until(lambda: (s := store.states.get("s")) and s["status"] == "done", what="the session to finish")
        for verb in ("interrupt", "inbox", "resume"):
            assert store.actions.get(ids[verb])["status"] == "done"
            again(store, ids[verb])
        await until(lambda: all(finished(store, ids[v]) for v in ("interrupt", "inbox", "resume")),
                    what="the actions applied again")

    run(store, scenario)
    for verb in ("interrupt", "inbox", "resume"):
        action = store.actions.get(ids[verb])
        assert (action["status"], action["error"]) == ("done", None), (verb, action)
    used = [g["action_id"] for s in store.steps.search(session_id="s") for g in s.get("guidance") or []]
    assert used.count(ids["interrupt"]) == 1 and used.count(ids["inbox"]) == 1


def test_a_parked_control_that_took_effect_is_done(store):
    """Five attempts that never ended, the last of which had applied the
    guidance: parking asks the table, which finds the guidance's id in the
    session, so the action is done; one whose id is nowhere is parked."""
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "echo", "config": {"interval_s": 0.05}})
    record = "".join(f"started alone by w{n} at 2026-11-27T10:00:0{n}.000000000\n" for n in range(5))

    def tried_before(type_: str, payload: dict, record: str) -> dict:
        """An action appended as five attempts that never ended left it (in one
        commit: the dispatcher must not see it before its record)."""
        row = dict(id=str(ULID()), type=type_, created_at=codec.utcnow(), agent_id="a", session_id="s",
                   conversation_id=None, priority=0, payload=payload, status="pending", processed=False, processed_at=None, claimed_by=None,
                   lease_until=None, attempts=5, error=record)
        store.writer.append("actions", [row])
        return row

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 1, what="a first step")
        used = store.actions.enqueue("interrupt", agent_id="a", session_id="s", payload={"guidance": "hello"})
        await until(lambda: finished(store, used["id"]), what="guidance")
        await until(lambda: any(g["action_id"] == used["id"] for s in store.steps.search(session_id="s")
                                for g in s.get("guidance") or []), what="the guidance used")
        never = tried_before("interrupt", {"guidance": "never"}, record)
        again(store, used["id"], record, attempts=5)
        await until(lambda: finished(store, used["id"]) and finished(store, never["id"]), what="parking")
        return used["id"], never["id"]

    used, never = run(store, scenario)
    assert store.actions.get(used)["status"] == "done"
    assert store.actions.get(never)["status"] == "failed"
    assert store.actions.get(never)["error"].startswith("parked after 5 attempts")


def fail_one_save(store: Store, which) -> list[str]:
    """Make the store fail the first snapshot save for which ``which(snapshot)``
    is true, as an object store that is down does; returns the sessions failed."""
    real_submit, failed = store.states.submit, []

    def submit(snapshot, loop=None):
        if which(snapshot) and not failed:
            failed.append(snapshot["session_id"])
            future = loop.create_future()
            future.set_exception(OSError("the object store is down"))
            return future
        return real_submit(snapshot, loop=loop)
    store.states.submit = submit
    return failed


def held_items(snapshot: dict) -> list[str]:
    return [i.get("action_id") for i in snapshot.get("pending_guidance") or []]


def test_a_control_whose_save_failed_is_saved_before_it_is_done(store):
    """The store fails the snapshot save that carries a pause (an S3 outage):
    the attempt raises, but the running session's memory already says paused
    and holds the action's id.  Tried again, the action finds its id there; it
    must save that memory before it ends done, or the store says running for
    good while the session waits paused (test_object_storage's outage test
    failed so in whole runs)."""
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "echo", "config": {"interval_s": 0.05}})

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 1, what="a first step")
        failed = fail_one_save(store, lambda snapshot: snapshot.get("status") == "paused")
        pause = store.actions.enqueue("pause", agent_id="a", session_id="s")["id"]
        await until(lambda: finished(store, pause), timeout=60, what="the pause to finish")
        assert failed, "the pause's save was never tried"
        assert store.actions.get(pause)["status"] == "done"
        await until(lambda: store.states.get("s")["status"] == "paused", timeout=10,
                    what="the store to say paused")

    run(store, scenario)


def test_a_childs_result_whose_save_failed_is_saved_before_it_is_done(store):
    """The same for an inbox item given to a paused parent (child_controls.deliver):
    memory holds the item after the failed save, and only a save puts it where a
    crash cannot lose it."""
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "echo", "config": {"interval_s": 0.05}})
    key = "child-c-1"

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 1, what="a first step")
        pause = store.actions.enqueue("pause", agent_id="a", session_id="s")["id"]
        await until(lambda: finished(store, pause), what="paused")
        failed = fail_one_save(store, lambda snapshot: key in held_items(snapshot))
        result = store.actions.enqueue("child_result", agent_id="a", session_id="s", payload={
            "key": key, "child_session_id": "c", "child_agent_id": "ca", "status": "done", "text": "42"})["id"]
        await until(lambda: finished(store, result), timeout=60, what="the child's result to finish")
        assert failed, "the item's save was never tried"
        assert store.actions.get(result)["status"] == "done"
        await until(lambda: key in held_items(store.states.get("s")), timeout=10, what="the store to hold the item")

    run(store, scenario)


def test_a_childs_result_for_a_session_live_on_another_worker_is_handed_back(store):
    """A finished parent is anyone's to wake, so a worker may claim its child's
    result; by the time the handler runs, the parent's own runner on another
    worker may have woken it (stored ``running``).  The item is that runner's to
    take: the handler raises SessionLost (the dispatcher hands the action back to
    the queue) and writes nothing.  It wrote the item into the stored snapshot
    instead, and the runner's next save dropped it (test_processes' killed worker:
    a child's second result never reached its parent)."""
    import asyncio
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from runtime.base.fence import SessionLost
    from runtime.base.persistence import Persistence
    from runtime.dispatch.child_controls import ChildControls
    from runtime.session.live_sessions import SessionRegistry

    now = datetime.now(timezone.utc)
    store.states.save({"session_id": "p", "agent_id": "a", "moniker": "scripted", "task": "delegate",
                       "config": {"interval_s": 0, "frames": [{"text": "x"}]}, "status": "running",
                       "status_reason": "woken", "iteration": 4, "step_token": "4", "next_step_token": "5",
                       "state": {}, "pending_guidance": [], "owner": "another-worker", "created_at": now,
                       "updated_at": now})
    controls = ChildControls(SessionRegistry(), None, SimpleNamespace(persist=Persistence(store)))
    payload = {"key": "child:c:2", "child_session_id": "c", "child_agent_id": "ca", "generation": 2,
               "status": "done", "text": "the second result"}
    action = {"id": "act-1", "type": "child_result", "agent_id": "a", "session_id": "p", "payload": payload}
    with pytest.raises(SessionLost):
        asyncio.run(controls.child_result(action, payload))
    assert held_items(store.states.get("p")) == []
