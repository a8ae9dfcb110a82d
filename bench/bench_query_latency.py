"""Query latency as the history grows: listing one session's steps over HTTP and
the dispatcher's pending-action poll, at 10k, 100k and 1M step rows.

    python -m bench.bench_query_latency [--quick] [--sizes 10000,100000,1000000]

One store grows through the sizes: rows are bulk-loaded with
``store.writer.append`` in big batches (few fragments, as group commit and
compaction leave them), sessions hold ``--per-session`` iterations each, and the
actions table gets ``--actions-ratio`` processed actions per step row plus a
handful pending (the poll's real situation: a long history, little to do).
After each load the store's own maintenance runs if store/maintenance.py exists
(indexes, compaction), then app.py is started on the directory and asked for
``GET /api/agent-steps?session_id=…&limit=100`` of random sessions.  The poll
is ``store.actions.pending()`` in this process, as agents.py calls it.
"""
import argparse
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

from ulid import ULID

from bench.common import emit, machine, progress, run_maintenance, summary, table_health, timed_ms
from store import Store
from tests.harness import Service

TARGET_LIST_P50_MS = 20  # at 1M rows
BATCH = 50_000
PENDING = 20  # pending actions the poll must find under the processed history


def step_rows(sessions: list[tuple[str, str]], start: int, count: int, per_session: int):
    """Step rows start..start+count of a history where session k holds
    iterations 0..per_session-1, yielded in batches."""
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    batch = []
    for i in range(start, start + count):
        agent_id, session_id = sessions[i // per_session]
        batch.append({"id": str(ULID()), "created_at": t0 + timedelta(milliseconds=i), "agent_id": agent_id,
                      "session_id": session_id, "iteration": i % per_session, "step_token": str(i),
                      "next_step_token": str(i + 1), "status": "ok", "text": f"step {i}",
                      "data": {"n": i}, "state": {"n": i}, "guidance": None, "notes": None,
                      "latency_ms": 0.1, "error": None, "usage": None})
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def action_rows(count: int, pending: int):
    now = datetime.now(timezone.utc)
    rows = []
    for i in range(count + pending):
        done = i < count
        rows.append({"id": str(ULID()), "created_at": now, "type": "pause", "agent_id": str(ULID()),
                     "session_id": str(ULID()), "conversation_id": None, "priority": 0, "payload": {},
                     "status": "done" if done else "pending", "processed": done,
                     "processed_at": now if done else None, "claimed_by": None, "lease_until": None,
                     "attempts": 1 if done else 0, "error": None})
    for k in range(0, len(rows), BATCH):
        yield rows[k:k + BATCH]


def grow(store: Store, sessions, have: int, want: int, per_session: int, actions_ratio: float) -> float:
    started = time.perf_counter()
    for batch in step_rows(sessions, have, want - have, per_session):
        store.writer.append("agent_steps", batch)
    n_actions = int((want - have) * actions_ratio)
    for batch in action_rows(n_actions, pending=0):
        store.writer.append("actions", batch)
    return time.perf_counter() - started


def measure_at(root: str, store: Store, live_sessions, n_rows: int, queries: int) -> dict:
    svc = Service(f"{root}/data", root)
    svc.start_app()
    try:
        listing, in_process = [], []
        for _ in range(queries):
            _, session_id = random.choice(live_sessions)
            started = time.perf_counter()
            r = svc.get("/api/agent-steps", session_id=session_id, limit=100)
            listing.append((time.perf_counter() - started) * 1000)
            assert r.status_code == 200 and r.json()["steps"], r.text[:200]
            in_process.append(timed_ms(store.steps.search, session_id=session_id, limit=100))
        poll = [timed_ms(store.actions.pending, 100) for _ in range(queries)]
        assert len(store.actions.pending(100)) == PENDING
    finally:
        svc.stop()
    return {"step_rows": n_rows, "action_rows": store.actions.count(), "list_steps_http": summary(listing),
            "list_steps_in_process": summary(in_process), "pending_poll": summary(poll)}



def run(sizes: list[int], per_session: int, actions_ratio: float, queries: int) -> dict:
    result = {"benchmark": "query_latency", "machine": machine(), "per_session": per_session,
              "actions_ratio": actions_ratio, "runs": []}
    with tempfile.TemporaryDirectory() as root:
        store = Store(f"{root}/data/lancedb")
        sessions = [(str(ULID()), str(ULID())) for _ in range(max(sizes) // per_session + 1)]
        for batch in action_rows(0, pending=PENDING):
            store.writer.append("actions", batch)
        have = 0
        for n in sorted(sizes):
            progress(f"loading to {n} step rows")
            load_s = grow(store, sessions, have, n, per_session, actions_ratio)
            have = n
            maintenance = run_maintenance(store)
            figures = measure_at(root, store, sessions[: max(1, n // per_session)], n, queries)
            figures.update(load_s=round(load_s, 1), maintenance=maintenance, tables=table_health(store))
            result["runs"].append(figures)
            progress(f"{n}: list p50 {figures['list_steps_http']['p50_ms']} ms")
        store.close()
    last = result["runs"][-1]
    result["target"] = {"list_steps_p50_ms": TARGET_LIST_P50_MS, "at_rows": last["step_rows"],
                        "met": last["list_steps_http"]["p50_ms"] <= TARGET_LIST_P50_MS}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--per-session", type=int, default=1000, help="iterations per session")
    parser.add_argument("--actions-ratio", type=float, default=0.1, help="processed actions per step row")
    parser.add_argument("--queries", type=int, default=100, help="queries per size and kind")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.per_session, args.queries = "2000", 100, 10
    emit(run([int(x) for x in args.sizes.split(",")], args.per_session, args.actions_ratio, args.queries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
