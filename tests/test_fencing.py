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
from tests.test_workers import assert_applied_once, owner, send, service, wait_workers, workers  # noqa: F401


def _heartbeat_after(svc, worker_id: str, when: datetime) -> bool:
    beat = workers(svc)[worker_id]["heartbeat_at"]
    beat = datetime.fromisoformat(beat.replace("Z", "+00:00")) if isinstance(beat, str) else beat
    return beat > when


def test_a_frozen_worker_does_not_step_sessions_it_lost(service):
    svc = service
    svc.agents_args = ["--dead-after", "3"]
    svc.start()
    (first,) = wait_workers(svc, 1)
    svc.start_worker()
    (second,) = set(wait_workers(svc, 2)) - {first}
    stalled, adopter = first, second  # svc.agents is the first worker

    mine: list[dict] = []
    made = 0
    while len(mine) < 3:
        assert made < 24, "the first worker got almost no sessions"
        agent = svc.create("echo", config={"interval_s": 0.1})
        made += 1
        svc.wait_status(agent["session_id"], "running", timeout=30)
        if owner(svc, agent["session_id"]) == stalled:
            mine.append(agent)
    sids = [a["session_id"] for a in mine]
    before = {send(svc, a, "interrupt", guidance=f"before stop {i}"): a["session_id"] for i, a in enumerate(mine)}
    assert_applied_once(svc, list(before), by=stalled)

    svc.agents.send_signal(signal.SIGSTOP)
    try:
        counts = {sid: len(svc.steps(sid)) for sid in sids}
        # Sent while A is frozen: they wait for B to adopt the sessions.
        during = {send(svc, a, "interrupt", guidance=f"while frozen {i}"): a["session_id"]
                  for i, a in enumerate(mine)}
        for sid in sids:
            wait_for(lambda: owner(svc, sid) == adopter, timeout=45, what=f"{adopter} to adopt {sid}")
        for sid in sids:  # B steps them on, past the iterations A would write next
            svc.wait_steps(sid, counts[sid] + 3, timeout=30)
    finally:
        thawed_at = datetime.now(timezone.utc)
        svc.agents.send_signal(signal.SIGCONT)

    # A is back: give it every chance to do harm (its heartbeat lands, so its
    # loop has run), while B steps every session a few times more.
    wait_for(lambda: _heartbeat_after(svc, stalled, thawed_at), timeout=30, what="the thawed worker to heartbeat")
    counts = {sid: len(svc.steps(sid)) for sid in sids}
    for sid in sids:
        svc.wait_steps(sid, counts[sid] + 5, timeout=30)
    after = {send(svc, a, "interrupt", guidance=f"after thaw {i}"): a["session_id"] for i, a in enumerate(mine)}
    for sid in sids:
        svc.wait_steps(sid, len(svc.steps(sid)) + 1, timeout=30)

    for sid in sids:
        steps = svc.steps(sid)
        its = iterations(steps)
        dupes = sorted({i for i in its if its.count(i) > 1})
        assert not dupes, f"session {sid} stepped twice at iterations {dupes[:10]} (two workers ran it)"
        assert_contiguous(steps, sid)
        assert owner(svc, sid) == adopter, f"{sid}: the stale worker wrote its ownership back"
        for action_id, target in {**before, **during, **after}.items():
            if target == sid:
                assert delivered(steps, action_id) == 1, f"guidance {action_id} reached {delivered(steps, action_id)} steps"
    assert_applied_once(svc, [*during, *after], by=adopter)
    assert svc.agents.poll() is None, "the thawed worker exited instead of dropping the sessions it lost"
    logs = "".join(open(os.path.join(svc.log_dir, n)).read() for n in os.listdir(svc.log_dir))
    assert "lost session" in logs, "the thawed worker did not say it dropped the sessions"
