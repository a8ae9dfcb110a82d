"""Restart: how fast a worker brings back the sessions a dead worker held.

    python -m bench.bench_adoption [--quick] [--sessions 10000] [--chunk N] [--unindexed]

Seeds ``--sessions`` snapshots owned by a worker that never heartbeat (dead),
status ``running``, moniker ``echo`` with ``interval_s: 86400``: each has its
step 0 persisted, and every third one also a step 1 its snapshot does not have
yet (the snapshot is saved behind the step, so a crash can leave it one step
behind; adoption must fold that step in, not run iteration 1 again).  The
store's upkeep then indexes them, as a worker that ran them a while leaves its
tables (``--unindexed``: not, the worst case for the newer-steps reads).  Then
starts AgentService in this process on the same store and times, from its
start, until the first session has persisted a new step (chunks step as
they are taken), until every session is adopted (running in this worker)
and until every one has persisted a new step; each then waits out its
interval, so the figures are the adoption path's, not the step loop's.

At the end the store is checked: each session owned by the new worker, and no
(session, iteration) twice.  The target: 10,000 sessions adopted and stepping
within 10 s.
"""
import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter

from bench.common import emit, machine, progress, run_in_process, run_maintenance
from store import Store, query
from tests import orphans

TARGET_SESSIONS, TARGET_S = 10_000, 10.0  # all adopted and stepping within 10 s
DEAD_WORKER = "worker-dead-bench"


def seed_orphans(store: Store, n: int, owner: str = DEAD_WORKER, interval_s: float = 86_400) -> dict[str, int]:
    """n running sessions owned by ``owner`` (tests/orphans.py); session id -> its last persisted iteration."""
    return orphans.seed_orphans(store, n, owner, interval_s)


def stepped_on(service, last: dict[str, int]) -> int:
    """How many sessions run in ``service`` past their seeded history (a session's
    iteration moves once its step row is durable; the store is checked at the end)."""
    return sum(1 for sid, it in last.items() if (agent := service.sessions.get(sid)) and agent.iteration > it)


def stepped_in_store(store: Store, last: dict[str, int]) -> int:
    """How many sessions have a stored step past their seeded history."""
    return len({r["session_id"] for r in query.rows(store.steps.table, store.steps.name, "iteration >= 1",
                                                    columns=["session_id", "iteration"])
                if r["iteration"] > last[r["session_id"]]})


def duplicates(store: Store) -> int:
    """(session, iteration) pairs stored more than once."""
    pairs = Counter((r["session_id"], r["iteration"]) for r in query.rows(
        store.steps.table, store.steps.name, None, columns=["session_id", "iteration"]))
    return sum(1 for c in pairs.values() if c > 1)


def run(sessions: int, chunk: int | None = None, indexed: bool = True, timeout_s: float = 600) -> dict:
    """Seed ``sessions`` orphans, start a worker, time adoption and first steps."""
    import runtime.worker.service as service_module

    default_chunk, service_module.ADOPT_CHUNK = service_module.ADOPT_CHUNK, chunk or service_module.ADOPT_CHUNK
    try:
        return _run(sessions, service_module.ADOPT_CHUNK, indexed, timeout_s)
    finally:
        service_module.ADOPT_CHUNK = default_chunk


def _run(sessions: int, chunk: int, indexed: bool, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as root:
        store = Store(f"{root}/db")
        progress(f"seeding {sessions} orphaned sessions")
        t0 = time.perf_counter()
        last = seed_orphans(store, sessions)
        seed_s = time.perf_counter() - t0
        if indexed:
            run_maintenance(store)

        async def scenario(service):
            started = time.perf_counter()
            first_s = adopted_s = stepping_s = None
            while stepping_s is None and time.perf_counter() - started < timeout_s:
                await asyncio.sleep(0.1)
                now, stepped = time.perf_counter() - started, stepped_on(service, last)
                first_s = first_s or (now if stepped else None)
                if adopted_s is None and len(service.sessions.sessions) >= sessions:
                    adopted_s = now
                if stepped >= sessions:
                    stepping_s = now
            return {"first_s": first_s, "adopted_s": adopted_s, "stepping_s": stepping_s, "worker": service.worker_id}

        try:
            timing = run_in_process(store, scenario, dead_after_s=15.0)
            owners = Counter(r["owner"] for r in query.rows(store.states.table, store.states.name, None,
                                                            columns=["owner"]))
            dup, in_store = duplicates(store), stepped_in_store(store, last)
        finally:
            store.close()
    adopted_s, stepping_s = timing["adopted_s"], timing["stepping_s"]
    per_s = lambda s: round(sessions / s, 1) if s else None  # noqa: E731
    return {"sessions": sessions, "chunk": chunk, "indexed": indexed, "seed_s": round(seed_s, 1),
            "first_stepped_s": timing["first_s"] and round(timing["first_s"], 2),
            "adopted_s": adopted_s and round(adopted_s, 2), "all_stepped_s": stepping_s and round(stepping_s, 2),
            "adopted_per_s": per_s(adopted_s), "stepping_per_s": per_s(stepping_s),
            "stepped_on_in_store": in_store, "owned_by_new_worker": owners.get(timing["worker"], 0),
            "duplicate_iterations": dup}


def verdict(figures: dict) -> dict:
    """The target, met or not; not judged below its size (fixed costs dominate)."""
    met = None
    if figures["sessions"] >= TARGET_SESSIONS:
        met = (figures["all_stepped_s"] is not None and figures["all_stepped_s"] <= TARGET_S
               and figures["duplicate_iterations"] == 0)
    return {"sessions": TARGET_SESSIONS, "all_stepping_within_s": TARGET_S, "met": met}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny size, for the smoke test")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=None, help="ADOPT_CHUNK (default: the service's)")
    parser.add_argument("--unindexed", action="store_true", help="no upkeep between seeding and the restart")
    args = parser.parse_args(argv)
    if args.quick:
        args.sessions = 50
    figures = run(args.sessions, args.chunk, indexed=not args.unindexed)
    emit({"benchmark": "adoption", "machine": machine(), "run": figures, "target": verdict(figures)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
