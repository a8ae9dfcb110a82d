"""Several agents.py workers on one data directory, and workers dying.

What these prove, on what was persisted: sessions are spread over the workers
and each is run by exactly one of them (a session run twice would show
duplicate iterations); every action is applied once, by the owner of its
session; when a worker is killed with SIGKILL its sessions are adopted by the
survivor, keep their status and keep stepping; a worker restarted in its own
slot resumes its sessions at once; and a step cut short by a crash is recorded
as interrupted and the next step is told.
"""
import time

from tests.chaos_client import assert_contiguous, wait_actions_finished, wait_new_steps
from tests.harness import wait_for
from tests.worker_pool import (assert_applied_once, assert_guidance_once, owner, send,  # noqa: F401 (service: a fixture)
                               service, wait_workers)


def test_two_workers_share_sessions_and_the_survivor_takes_over(service):
    """Sessions spread over two workers, each run by one and each action applied
    once; after kill -9 of one worker the other adopts its sessions (paused stay
    paused, running keep stepping, 0..n throughout) and applies their actions."""
    svc = service
    svc.agents_args = ["--dead-after", "3"]
    svc.start()
    first = wait_workers(svc, 1)
    svc.start_worker()
    both = wait_workers(svc, 2)
    (second,) = set(both) - set(first)

    agents: list[dict] = []
    while len(agents) < 10 or len({owner(svc, a["session_id"]) for a in agents}) < 2:
        assert len(agents) < 30, "every session went to the same worker"
        agents.append(svc.create("echo", config={"interval_s": 0.05}))
        svc.wait_status(agents[-1]["session_id"], "running", timeout=90)
        time.sleep(0.1)
    owners = {a["session_id"]: owner(svc, a["session_id"]) for a in agents}
    assert set(owners.values()) == {*first, second}, owners

    by_session = {a["session_id"]: a for a in agents}
    paused = agents[::3]
    interrupts = {send(svc, a, "interrupt", guidance=f"before kill {i}"): a["session_id"]
                  for i, a in enumerate(agents) if a not in paused}
    pauses = [send(svc, a, "pause") for a in paused]
    assert_applied_once(svc, [*interrupts, *pauses])
    assert_guidance_once(svc, interrupts)
    for a in agents:
        assert_contiguous(svc.steps(a["session_id"]), a["session_id"])

    # kill -9 the worker that owns the most sessions; the other must adopt them.
    victim = max(set(owners.values()), key=lambda w: list(owners.values()).count(w))
    survivor = (set(owners.values()) - {victim}).pop()
    orphans = [by_session[sid] for sid, w in owners.items() if w == victim]
    victim_proc = svc.agents if svc.agents.pid == both[victim]["pid"] else svc.workers[0]
    assert victim_proc.pid == both[victim]["pid"]
    paused_counts = {a["session_id"]: len(svc.steps(a["session_id"])) for a in paused}
    victim_proc.kill()
    victim_proc.wait(timeout=10)

    # Actions sent to the orphans while nobody runs them wait for the survivor.
    running_orphans = [a for a in orphans if a not in paused]
    late = {send(svc, a, "interrupt", guidance=f"after kill {i}"): a["session_id"]
            for i, a in enumerate(running_orphans)}
    for a in orphans:
        wait_for(lambda: owner(svc, a["session_id"]) == survivor, timeout=45,
                 what=f"{survivor} to adopt {a['session_id']}")
    assert_applied_once(svc, list(late), by=survivor)
    assert_guidance_once(svc, late)
    wait_new_steps(svc, [a["session_id"] for a in agents if a not in paused], n=3)

    for a in paused:
        sid = a["session_id"]
        assert svc.session(sid)["status"] == "paused"
        assert len(svc.steps(sid)) == paused_counts[sid], f"paused session {sid} stepped"
    # A paused orphan obeys the survivor: resume it and it steps again.
    paused_orphans = [a for a in orphans if a in paused]
    resumes = [send(svc, a, "resume") for a in paused_orphans]
    assert_applied_once(svc, resumes, by=survivor)
    wait_new_steps(svc, [a["session_id"] for a in paused_orphans], n=2)
    for a in agents:
        assert_contiguous(svc.steps(a["session_id"]), a["session_id"])
    assert {owner(svc, a["session_id"]) for a in orphans} == {survivor}


def test_a_restarted_worker_resumes_its_sessions_at_once(service):
    """kill -9 and restart in the same slot: the worker gets its id back and
    resumes its sessions long before --dead-after (60 s) would let anyone adopt them."""
    svc = service
    svc.agents_args = ["--dead-after", "60"]
    svc.start()
    (worker_id,) = wait_workers(svc, 1)
    running = svc.create("joke", "cats", config={"interval_s": 0.05})
    paused = svc.create("joke", "bats", config={"interval_s": 0.05})
    svc.wait_steps(running["session_id"], 3)
    svc.wait_steps(paused["session_id"], 3)
    svc.control(paused["agent_id"], "pause")
    before = {sid: len(svc.steps(sid)) for sid in (running["session_id"], paused["session_id"])}

    svc.kill_agents()
    killed_at = time.monotonic()
    svc.start_agents()
    svc.wait_steps(running["session_id"], before[running["session_id"]] + 3, timeout=55)
    elapsed = time.monotonic() - killed_at
    assert elapsed < 60, f"resumed only after {elapsed:.1f}s: as late as a takeover would be"
    assert owner(svc, running["session_id"]) == worker_id
    assert svc.session(paused["session_id"])["status"] == "paused"
    assert len(svc.steps(paused["session_id"])) == before[paused["session_id"]]
    assert_contiguous(svc.steps(running["session_id"]))


def test_a_restarted_worker_finishes_the_actions_it_had_claimed(service):
    """An action being applied when its worker was killed (a destroy waiting for
    a slow step) is finished by the worker restarted in the same slot, before
    the actions accepted after it, not left 'processing' until its lease runs out."""
    svc = service
    svc.agents_args = ["--dead-after", "30"]
    svc.start()
    made = svc.create("sleepy", config={"interval_s": 0, "sleep_s": 3})
    svc.wait_status(made["session_id"], "running", timeout=90)
    destroy = send(svc, made, "destroy")
    wait_for(lambda: svc.get(f"/api/actions/{destroy}").json()["status"] == "processing", timeout=90,
             interval=0.02, what="the destroy to be claimed")
    svc.kill_agents()
    svc.start_agents()
    # Accepted after the destroy, so applied after it: it must find the session stopped.
    later = send(svc, made, "interrupt", guidance="too late")
    late = wait_actions_finished(svc, [later], timeout=90)[later]
    assert late["status"] == "failed", f"an interrupt accepted after a destroy was applied before it: {late}"
    action = wait_actions_finished(svc, [destroy], timeout=90)[destroy]
    assert action["status"] == "done", action
    assert svc.wait_status(made["session_id"], "stopped", timeout=90)["status"] == "stopped"
    assert_contiguous(svc.steps(made["session_id"]))


def test_a_step_in_flight_at_a_crash_is_recorded_as_interrupted(service):
    """kill -9 during a long step: after the restart the step is a row with status
    'interrupted' (outcome unknown) at its iteration, the next step's guidance
    carries a note saying so, and iterations stay 0..n."""
    svc = service
    svc.agents_args = ["--session-heartbeat", "0.5"]
    svc.start()
    made = svc.create("sleepy", config={"interval_s": 0, "sleep_s": 3})
    sid = made["session_id"]
    snap = wait_for(lambda: (s := svc.session(sid)).get("step_started_at") and s, timeout=60, interval=0.1,
                    what="a step in flight")
    svc.kill_agents()
    cut = snap["iteration"] + 1
    svc.start_agents()

    steps = svc.wait_steps(sid, cut + 2, timeout=60)
    assert_contiguous(steps)
    interrupted = steps[cut]
    assert interrupted["status"] == "interrupted", interrupted
    assert "outcome unknown" in interrupted["error"]
    after = steps[cut + 1]
    assert after["status"] == "ok"
    kinds = [(g.get("source") or {}).get("kind") for g in after["guidance"] or []]
    assert "interrupted_step" in kinds, after["guidance"]
    assert all(s["status"] == "ok" for i, s in enumerate(steps) if i != cut)
