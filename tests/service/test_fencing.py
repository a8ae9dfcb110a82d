"""Fencing: a worker that was only *slow* (stalled, paused, SIGSTOPped) longer
than --dead-after must not keep running the sessions another worker adopted.

The scenario, on what was persisted: two agents.py workers on one data
directory; worker A's sessions step; A is frozen with SIGSTOP until worker B
has adopted all of them (the persisted owner column says B) and stepped them
further; then A is thawed with SIGCONT.  Without fencing, A's runners wake up
and append the iterations B already wrote (duplicates), and A's snapshot saves
write ``owner = A`` back over B's adoption.  With fencing A finds out it lost
them before it writes anything for them, drops them, and lives on.
"""
import os
import signal
from datetime import datetime, timezone

from tests.chaos_client import assert_contiguous, delivered, iterations
from tests.harness import wait_for
from tests.worker_pool import assert_applied_once, owner, send, service, wait_workers, workers  # noqa: F401


def _heartbeat_after(svc, worker_id: str, when: datetime) -> bool:
    beat = workers(svc)[worker_id]["heartbeat_at"]
    beat = datetime.fromisoformat(beat.replace("Z", "+00:00")) if isinstance(beat, str) else beat
    return beat > when


def _frozen_between_commits(svc, proc, sid: str) -> int:
    """SIGSTOP ``proc`` right after a new step row of ``sid`` lands: its steps
    take 2 s, so no step commit of it is under way at the freeze (a commit
    already in flight at a freeze is the one thing fencing cannot stop; see
    runtime/base/fence.py).  Returns the step count at the freeze."""
    seen = len(svc.steps(sid))
    count = wait_for(lambda: (n := len(svc.steps(sid))) > seen and n, timeout=90, interval=0.02,
                     what=f"a new step of {sid}")
    proc.send_signal(signal.SIGSTOP)
    return count


def test_a_frozen_worker_does_not_step_sessions_it_lost(service):
    svc = service
    svc.agents_args = ["--dead-after", "3"]
    svc.start()
    (first,) = wait_workers(svc, 1)
    svc.start_worker()
    (second,) = set(wait_workers(svc, 2)) - {first}
    stalled, adopter = first, second  # svc.agents is the first worker

    made = 0
    while True:
        assert made < 12, "the first worker got no session"
        agent = svc.create("sleepy", config={"interval_s": 0, "sleep_s": 2})
        made += 1
        svc.wait_status(agent["session_id"], "running", timeout=90)
        if owner(svc, agent["session_id"]) == stalled:
            break
    sid = agent["session_id"]
    before = send(svc, agent, "interrupt", guidance="before the freeze")
    assert_applied_once(svc, [before], by=stalled)

    _frozen_between_commits(svc, svc.agents, sid)
    try:
        # Sent while A is frozen: it waits for B to adopt the session.
        during = send(svc, agent, "interrupt", guidance="while frozen")
        wait_for(lambda: owner(svc, sid) == adopter, timeout=45, what=f"{adopter} to adopt {sid}")
        # B steps it on, past the iteration A has in flight.
        svc.wait_steps(sid, len(svc.steps(sid)) + 2, timeout=90)
    finally:
        thawed_at = datetime.now(timezone.utc)
        svc.agents.send_signal(signal.SIGCONT)

    # A is back: give it every chance to do harm (its heartbeat lands, so its
    # loop has run, and its step in flight has finished), while B steps on.
    wait_for(lambda: _heartbeat_after(svc, stalled, thawed_at), timeout=90, what="the thawed worker to heartbeat")
    svc.wait_steps(sid, len(svc.steps(sid)) + 2, timeout=90)
    after = send(svc, agent, "interrupt", guidance="after the thaw")
    svc.wait_steps(sid, len(svc.steps(sid)) + 2, timeout=90)

    steps = svc.steps(sid)
    its = iterations(steps)
    dupes = sorted({i for i in its if its.count(i) > 1})
    assert not dupes, f"session {sid} stepped twice at iterations {dupes} (two workers ran it): {its}"
    assert_contiguous(steps, sid)
    assert owner(svc, sid) == adopter, f"{sid}: the stale worker wrote its ownership back"
    assert_applied_once(svc, [during, after], by=adopter)
    for action_id in (before, during, after):
        assert delivered(steps, action_id) == 1, f"guidance {action_id} reached {delivered(steps, action_id)} steps"
    assert svc.agents.poll() is None, "the thawed worker exited instead of dropping the session it lost"
    # It says so once it has checked: that check may wait behind a commit the
    # freeze cut in two (Lance retries it for up to 30 s), so wait for the line.
    def logs() -> str:
        return "".join(open(os.path.join(svc.log_dir, n)).read() for n in os.listdir(svc.log_dir))
    wait_for(lambda: f"lost session {sid}" in logs(), timeout=60, interval=0.2,
             what="the thawed worker to say it dropped the session")


# ---- the store's part, in this process ---------------------------------------

def _snapshot(session_id: str, owner: str | None, **extra) -> dict:
    return {"session_id": session_id, "agent_id": "a" + session_id, "moniker": "echo", "status": "running",
            "iteration": 0, "owner": owner, "created_at": datetime.now(timezone.utc), **extra}


def test_a_snapshot_save_never_overwrites_another_owner(tmp_path):
    """agent_state upserts are conditional on the stored owner: a save by a
    worker that lost the session is refused (and says so), other rows of the
    same commit land."""
    from store import Store
    store = Store(str(tmp_path / "db"))
    try:
        store.states.save(_snapshot("s1", "wb"))
        store.states.save(_snapshot("s2", "wa"))
        stale = store.states.submit(_snapshot("s1", "wa", iteration=7))
        fine = store.states.submit(_snapshot("s2", "wa", iteration=3))
        assert stale.result() is True and fine.result() in (True, None)  # one commit or two
        assert (store.states.get("s1")["owner"], store.states.get("s1")["iteration"]) == ("wb", 0)
        assert (store.states.get("s2")["owner"], store.states.get("s2")["iteration"]) == ("wa", 3)
        assert store.states.submit(_snapshot("s2", "wa", iteration=4)).result() is None  # nothing refused
        store.states.save(_snapshot("s3", "wb", status="done"))  # finished: runs nowhere, anyone may wake it
        assert store.states.submit(_snapshot("s3", "wa", iteration=1)).result() is None
        assert store.states.get("s3")["owner"] == "wa"
    finally:
        store.close()


def test_an_owner_that_reasserts_makes_a_pending_adoption_fail(tmp_path):
    """Adoption expects the snapshot it read unchanged: once the old owner has
    reasserted (or saved) the row, an adopter that read it before loses."""
    from store import Store
    store = Store(str(tmp_path / "db"))
    try:
        store.states.save(_snapshot("s1", "wa"))
        store.states.save(_snapshot("s2", "wa"))
        read = {sid: store.states.get(sid)["updated_at"] for sid in ("s1", "s2")}  # what an adopter read
        assert store.states.reassert(["s1"], "wa") == {"s1"}
        assert not store.states.adopt("s1", "wb", "wa", read["s1"])  # changed since it was read
        assert store.states.get("s1")["owner"] == "wa"
        assert store.states.adopt("s2", "wb", "wa", read["s2"])  # unchanged: adopted
        assert store.states.reassert(["s1", "s2"], "wa") == {"s1"}  # the read-back names what is held
    finally:
        store.close()


def test_a_guarded_append_is_dropped_when_its_guard_says_no(tmp_path):
    """The committer asks a step row's guard right before the commit."""
    import pytest
    from store import Store
    from store.writer import Fenced
    store = Store(str(tmp_path / "db"))
    try:
        step = {"agent_id": "a1", "session_id": "s1", "iteration": 0, "status": "ok"}
        _, refused = store.steps.submit(step, guard=lambda: False)
        with pytest.raises(Fenced):
            refused.result()
        _, kept = store.steps.submit({**step, "iteration": 1}, guard=lambda: True)
        kept.result()
        assert [s["iteration"] for s in store.steps.search(session_id="s1")] == [1]
    finally:
        store.close()
