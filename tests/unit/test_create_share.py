"""Which worker takes a new session (runtime/dispatch/create_share.py):
rendezvous hashing over the live workers, and anyone's after the grace."""
import asyncio
from datetime import datetime, timedelta, timezone

from runtime.dispatch.create_share import CreateShare, rendezvous_worker, waited_s

SESSIONS = [f"s-{i:04d}" for i in range(2000)]


def test_every_worker_computes_the_same_owner_whatever_the_order_it_sees_them_in():
    for session in SESSIONS[:200]:
        assert rendezvous_worker(session, ["host-0", "host-1", "host-2"]) == \
            rendezvous_worker(session, ["host-2", "host-0", "host-1"])


def test_sessions_spread_evenly():
    workers = ["host-0", "host-1", "host-2", "host-3"]
    counts = {w: 0 for w in workers}
    for session in SESSIONS:
        counts[rendezvous_worker(session, workers)] += 1
    assert all(400 <= n <= 600 for n in counts.values()), counts  # 500 each, give or take


def test_a_worker_leaving_moves_only_its_own_sessions():
    before = {s: rendezvous_worker(s, ["host-0", "host-1", "host-2"]) for s in SESSIONS}
    after = {s: rendezvous_worker(s, ["host-0", "host-2"]) for s in SESSIONS}
    moved = {s for s in SESSIONS if before[s] != after[s]}
    assert moved == {s for s in SESSIONS if before[s] == "host-1"}


def create(session_id: str, waited_s: float = 0.0) -> dict:
    return {"id": f"a-{session_id}", "type": "create", "session_id": session_id,
            "created_at": (datetime.now(timezone.utc) - timedelta(seconds=waited_s)).isoformat().replace("+00:00", "Z")}


def shares(workers, creates, **options) -> dict[str, list[str]]:
    async def live():
        return set(workers)

    async def take():
        return {w: [a["session_id"] for a in await CreateShare(w, live, **options).mine(creates)] for w in workers}
    return asyncio.run(take())


def test_each_fresh_create_is_claimed_by_exactly_one_live_worker():
    creates = [create(s) for s in SESSIONS[:300]]
    taken = shares(["host-0", "host-1"], creates)
    assert sorted(taken["host-0"] + taken["host-1"]) == SESSIONS[:300]
    assert 100 <= len(taken["host-0"]) <= 200


def test_a_create_that_waited_past_the_grace_is_anyones():
    creates = [create(s, waited_s=5.0) for s in SESSIONS[:50]]
    taken = shares(["host-0", "host-1"], creates, grace_s=2.0)
    assert taken["host-0"] == taken["host-1"] == SESSIONS[:50]


def test_the_queue_rows_text_time_is_read():
    assert 4.5 < waited_s({"created_at": "2026-11-28T20:06:08.461697Z"},
                          datetime(2026, 11, 28, 20, 6, 13, tzinfo=timezone.utc)) < 5.5
    assert waited_s({"created_at": None}, datetime.now(timezone.utc)) == 0.0


def test_alone_a_worker_takes_every_create():
    async def nobody_else():
        return set()
    creates = [create(s) for s in SESSIONS[:20]]
    assert asyncio.run(CreateShare("host-0", nobody_else).mine(creates)) == creates


def test_a_failing_view_keeps_the_last_one():
    calls = []

    async def flaky():
        calls.append(1)
        if len(calls) > 1:
            raise OSError("store down")
        return {"host-0", "host-1"}

    share = CreateShare("host-0", flaky, refresh_s=0.0)
    creates = [create(s) for s in SESSIONS[:100]]
    first = asyncio.run(share.mine(creates))
    assert asyncio.run(share.mine(creates)) == first and len(calls) == 2
    assert 0 < len(first) < 100
