"""Idle saving (agents.py ``--idle-saving``, on by default on object storage):
the rules that let an idle worker's chores skip reads that cannot find
anything new.  The dispatcher's quiet queue is tested in test_idle_poll.py;
an idle service's requests on SeaweedFS in tests/service/test_s3_requests.py."""
import asyncio
import time
from datetime import datetime, timedelta, timezone

import pytest

from monikers import default_registry
from runtime.base.aio import Backoff
from runtime.worker.monitor import HealthMonitor
from runtime.worker.service import IDLE_UPKEEP_S, AgentService
from store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def test_backoff_doubles_while_nothing_is_found_and_resets_at_a_find():
    backoff = Backoff(1.0, 10.0)
    assert [backoff.after(False) for _ in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.after(True) == 1.0
    assert Backoff(1.0, 1.0).after(False) == 1.0  # no room to back off: the period stays


def test_a_local_store_keeps_todays_cadence(store):
    service = AgentService(store, default_registry(), worker_id="w")
    assert not store.on_object_storage and not service.idle_saving
    assert service.heartbeat_s == 2.0 and service.monitor.retention_every_s == 0
    assert not service.dispatcher.skip_quiet
    assert Store.on_object_storage.fget(type("S", (), {"uri": "s3://bucket/db"})())
    assert not Store.on_object_storage.fget(type("S", (), {"uri": "file:///srv/db"})())


def test_object_storage_heartbeat_is_a_quarter_of_dead_after(store, monkeypatch):
    monkeypatch.setattr(Store, "on_object_storage", property(lambda self: True))
    service = AgentService(store, default_registry(), worker_id="w", dead_after_s=15)
    assert service.idle_saving and service.dispatcher.skip_quiet
    assert service.heartbeat_s == 3.75  # the lease is 7.5 s: two beats a lease
    assert AgentService(store, default_registry(), worker_id="w", dead_after_s=15, heartbeat_s=10).heartbeat_s == 3.75
    assert AgentService(store, default_registry(), worker_id="w", dead_after_s=15, heartbeat_s=1).heartbeat_s == 1


def test_the_next_adoption_round_is_due_when_a_live_peer_could_be_dead(store):
    service = AgentService(store, default_registry(), worker_id="me", dead_after_s=15, adopt_every_s=5,
                           idle_saving=True)
    now_wall, now = datetime.now(timezone.utc), time.monotonic()
    ago = lambda s: ("running", now_wall - timedelta(seconds=s))  # noqa: E731
    # no peer: at the latest dead_after from now (a peer may start and die meanwhile)
    assert service._next_adoption({"me": ago(0)}) - now == pytest.approx(15, abs=0.5)
    # a peer that beat 3 s ago is dead 12 s from now if it beats no more; a dead one does not count
    assert service._next_adoption({"me": ago(0), "peer": ago(3), "gone": ago(100)}) - now == pytest.approx(12, abs=0.5)
    # never sooner than adopt_every_s
    assert service._next_adoption({"peer": ago(14)}) - now == pytest.approx(5, abs=0.5)
    off = AgentService(store, default_registry(), worker_id="me", adopt_every_s=5, idle_saving=False)
    assert off._next_adoption({}) - time.monotonic() == pytest.approx(5, abs=0.5)


def counting_adopt(service):
    calls = []
    whole = service.adopt

    async def adopt():
        calls.append(time.monotonic())
        return await whole()
    service.adopt = adopt
    return calls


def test_quiet_adoption_rounds_read_only_the_workers_until_a_peer_stops(store):
    """After a whole round that found nothing to take, a due round reads the
    workers only; a peer that stopped (or died) since brings a whole round,
    which takes its session."""
    store.workers.submit_beat("peer").result()
    now = datetime.now(timezone.utc)
    store.states.submit({"session_id": "s1", "agent_id": "a1", "moniker": "echo", "status": "paused",
                         "owner": "peer", "iteration": 0, "created_at": now, "updated_at": now,
                         "config": {"interval_s": 60}}).result()
    service = AgentService(store, default_registry(), worker_id="me", dead_after_s=15, adopt_every_s=5,
                           idle_saving=True)
    calls = counting_adopt(service)

    async def rounds():
        await service._adoption_round()  # the first: whole
        assert len(calls) == 1 and service._quiet is not None
        assert service._adoption_due - time.monotonic() == pytest.approx(15, abs=2)  # the peer beat just now
        await service._adoption_round()  # not due yet: nothing read
        service._adoption_due = 0
        await service._adoption_round()  # due: the workers read, nobody died
        assert len(calls) == 1
        await asyncio.to_thread(lambda: store.workers.submit_beat("peer", status="stopped").result())
        service._adoption_due = 0
        await service._adoption_round()
        assert len(calls) == 2 and service.sessions.get("s1") is not None  # taken over
        for agent in service.sessions.running():
            agent.runner.cancel()
    asyncio.run(rounds())


def test_upkeep_waits_for_this_process_writes_or_a_minute(store, monkeypatch):
    service = AgentService(store, default_registry(), worker_id="w", idle_saving=True)
    assert service._upkeep_wanted()  # the first round
    store.workers.submit_beat("w").result()
    assert not service._upkeep_wanted()  # its own heartbeat is no reason
    store.actions.enqueue("interrupt", agent_id="a", session_id="s", payload={"guidance": "g"})
    assert service._upkeep_wanted()
    assert not service._upkeep_wanted()
    later = time.monotonic() + IDLE_UPKEEP_S + 1
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert service._upkeep_wanted()
    assert AgentService(store, default_registry(), worker_id="w", idle_saving=False)._upkeep_wanted()


class Retention:
    def __init__(self):
        self.reads = 0

    async def finished_sessions_before(self, when):
        self.reads += 1
        return []


def test_retention_reads_at_most_every_retention_every_s():
    from runtime.session.live_sessions import SessionRegistry

    persist = Retention()
    monitor = HealthMonitor(SessionRegistry(), persist, retention_every_s=600)

    async def checks():
        for _ in range(3):
            await monitor.check()
    asyncio.run(checks())
    assert persist.reads == 1
    every_check = HealthMonitor(SessionRegistry(), persist)
    asyncio.run(every_check.check())
    asyncio.run(every_check.check())
    assert persist.reads == 3
