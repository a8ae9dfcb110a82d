"""Orphaned sessions are adopted in bulk, once each.

A worker that restarts, or takes over a dead one, finds many sessions owned by
a worker that no longer beats.  It takes them a chunk at a time, with one
conditional update per chunk and one read of the chunk's newer steps
(store/state.py ``adopt_many``, store/steps.py ``after_many``).  What these
prove, on what was persisted: every orphan is adopted and steps on from where
its history ends, without running an iteration again (also for a snapshot one
step behind its history); two workers racing for the same orphans each take
a disjoint share; and the bulk update keeps the single adoption's guards
(another adopter, or an old owner that reasserted, wins the row).
"""
import asyncio
from collections import Counter

from runtime.base.aio import run_bounded
from tests import orphans
from tests.harness import until

DEAD = "worker-dead"


def seed_orphans(store, n: int, owner: str = DEAD, interval_s: float = 5.0) -> dict[str, int]:
    return orphans.seed_orphans(store, n, owner, interval_s)


def iterations(store) -> dict[str, list[int]]:
    """Each session's persisted iterations, sorted (repeats kept)."""
    found: dict[str, list[int]] = {}
    for row in store.steps.table.search().select(["session_id", "iteration"]).limit(10 ** 7).to_list():
        found.setdefault(row["session_id"], []).append(row["iteration"])
    return {sid: sorted(its) for sid, its in found.items()}


def stepped_on(services, last: dict[str, int]) -> bool:
    """Every seeded session runs in one of ``services`` and has persisted a step
    past its seeded history (a session's iteration moves once its step is durable)."""
    def running(sid):
        return next((a for a in (s.sessions.get(sid) for s in services) if a is not None), None)
    return all((agent := running(sid)) is not None and agent.iteration > it for sid, it in last.items())


def assert_each_iteration_once(store, last: dict[str, int]) -> None:
    """Each session's iterations are 0..n, none twice, past the seeded ones."""
    found = iterations(store)
    for sid, seeded in last.items():
        its = found[sid]
        assert its == list(range(len(its))), f"session {sid}: iterations {its}"
        assert len(its) > seeded + 1, f"session {sid} did not step on: {its}"


def test_orphans_are_adopted_in_chunks_and_step_on_once_each(tmp_path, monkeypatch):
    """1,500 orphans of a dead worker: one update and one steps read per chunk,
    all adopted by the new worker, each stepping on from its newest step."""
    import runtime.worker.service as service_module
    from store import Store
    from tests.harness import run_in_process

    store = Store(str(tmp_path / "db"))
    n = 1500
    last = seed_orphans(store, n)
    updates, reads = Counter(), Counter()
    adopt_many, after_many = store.states.adopt_many, store.steps.after_many
    monkeypatch.setattr(store.states, "adopt_many", lambda *a: updates.update(["chunk"]) or adopt_many(*a))
    monkeypatch.setattr(store.steps, "after_many", lambda *a: reads.update(["chunk"]) or after_many(*a))

    async def scenario(service):
        await until(lambda: stepped_on([service], last), timeout=300, what="every orphan to step on")
        return service.worker_id

    try:
        worker = run_in_process(store, scenario)
        chunks = -(-n // service_module.ADOPT_CHUNK)
        assert updates["chunk"] == chunks and reads["chunk"] == chunks
        held = store.states.get_many(list(last), columns=("session_id", "owner"))
        assert Counter(row["owner"] for row in held.values()) == {worker: n}
        assert_each_iteration_once(store, last)
    finally:
        store.close()


def test_two_workers_racing_for_the_same_orphans_take_each_once(tmp_path, monkeypatch):
    """Two workers (each with its own Store, as two processes would) start at
    once on 900 orphans, in small chunks so their rounds interleave: each
    session ends up owned and run by exactly one, and no iteration runs twice."""
    import runtime.worker.service as service_module
    from monikers import default_registry
    from runtime.worker.service import AgentService
    from store import Store

    monkeypatch.setattr(service_module, "ADOPT_CHUNK", 100)
    seeding = Store(str(tmp_path / "db"))
    last = seed_orphans(seeding, 900)
    stores = [Store(str(tmp_path / "db")) for _ in range(2)]

    async def main():
        services = [AgentService(s, default_registry(), worker_id=f"worker-{i}") for i, s in enumerate(stores)]
        stopping = asyncio.Event()
        tasks = [asyncio.create_task(s.run(stopping)) for s in services]
        try:
            await until(lambda: stepped_on(services, last), timeout=300, what="every orphan to step on")
            return [set(s.sessions.sessions) for s in services]
        finally:
            stopping.set()
            await asyncio.gather(*tasks)

    try:
        ran = run_bounded(main(), grace_s=1.0)
        assert not ran[0] & ran[1], "a session ran in both workers"
        assert ran[0] | ran[1] >= set(last)
        held = seeding.states.get_many(list(last), columns=("session_id", "owner"))
        assert all(held[sid]["owner"] == f"worker-{i}" for i in (0, 1) for sid in ran[i] if sid in last)
        assert_each_iteration_once(seeding, last)
    finally:
        for s in (*stores, seeding):
            s.close()


def test_a_bulk_adoption_keeps_the_single_adoptions_guards(tmp_path):
    """Of the rows read, the bulk update takes only those unchanged since: not
    the ones the old owner reasserted (it was slow, not dead), and not the ones
    another adopter took first."""
    from store import Store

    store = Store(str(tmp_path / "db"))
    try:
        seed_orphans(store, 30, owner="wa")
        read = store.states.resumable()  # what two adopters read
        ids = [r["session_id"] for r in read]
        assert store.states.reassert(ids[:5], "wa") == set(ids[:5])  # the old owner, alive after all
        assert store.states.adopt_many(read[5:15], "wb") == set(ids[5:15])
        assert store.states.adopt_many(read, "wc") == set(ids[15:])  # wb's and wa's rows are not taken
        owners = {sid: row["owner"] for sid, row in store.states.get_many(ids).items()}
        assert Counter(owners.values()) == {"wa": 5, "wb": 10, "wc": 15}
        assert store.states.adopt_many(read, "wd") == set()
    finally:
        store.close()
