"""Orphaned sessions for adoption tests and bench/bench_adoption.py: running
sessions whose owner no longer beats, written straight into the store."""
from datetime import datetime, timezone

from ulid import ULID

BATCH = 2000  # rows waiting together: a few group commits, not one per row


def seed_orphans(store, n: int, owner: str, interval_s: float) -> dict[str, int]:
    """n running ``echo`` sessions owned by ``owner`` with step 0 persisted, every
    third with a step 1 its snapshot does not have yet; id -> last iteration."""
    now = datetime.now(timezone.utc)
    last, snapshots, steps = {}, [], []
    for i in range(n):
        sid, aid = str(ULID()), str(ULID())
        snapshots.append({"session_id": sid, "agent_id": aid, "moniker": "echo", "task": f"orphan {i}",
                          "config": {"interval_s": interval_s}, "status": "running", "iteration": 0,
                          "step_token": "0", "next_step_token": "1", "state": {"n": 1, "heard": []},
                          "created_at": now, "owner": owner})
        last[sid] = 0 if i % 3 else 1
        steps += [{"agent_id": aid, "session_id": sid, "iteration": it, "status": "ok", "step_token": str(it),
                   "next_step_token": str(it + 1), "state": {"n": it + 1, "heard": []}} for it in range(last[sid] + 1)]
    for k in range(0, len(steps), BATCH):
        for future in [store.steps.submit(s)[1] for s in steps[k:k + BATCH]]:
            future.result()
    for k in range(0, n, BATCH):
        for future in [store.states.submit(s) for s in snapshots[k:k + BATCH]]:
            future.result()
    return last
