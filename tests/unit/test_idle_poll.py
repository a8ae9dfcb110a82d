"""The dispatcher's idle poll where the queue cannot be watched (object
storage: runtime/dispatch/dispatcher.py ``_poll_loop``).  There every look at
the queue's change token is an S3 request (a LIST), and looking every
``watch_s`` (0.02 s) cost ~180,000 requests an hour of an idle worker
(bench/bench_s3.py).  Idle, it now looks less and less often, up to
``idle_poll_s``; this process's own enqueue wakes it at once.

A local store stands in for the bucket: its inotify watch is turned off, so
the dispatcher polls the change token as it does on object storage."""
import asyncio

import pytest

from runtime.base.persistence import Persistence
from runtime.dispatch.dispatcher import Dispatcher
from store import Store
from tests.harness import finished, until


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


class Unwatched(Persistence):
    """The store's persistence as on object storage: no watch; counts the looks,
    and the queries a look may be followed by."""

    def __init__(self, store):
        super().__init__(store)
        self.looks = self.full_polls = self.releases = self.quiet_checks = 0

    async def pending_actions(self, limit):
        self.full_polls += 1
        return await super().pending_actions(limit)

    async def release_expired_actions(self):
        self.releases += 1
        return await super().release_expired_actions()

    async def open_actions(self):
        self.quiet_checks += 1
        return await super().open_actions()

    def watch_queue(self):
        return None

    def queue_change_token(self):
        self.looks += 1
        return super().queue_change_token()


async def handled(actions: list[dict]):
    async def handle(action: dict) -> None:
        actions.append(action)
    return handle


def run_dispatcher(store, scenario, **options):
    async def main():
        persist, applied, stopping = Unwatched(store), [], asyncio.Event()
        dispatcher = Dispatcher(persist, await handled(applied), worker_id="w", **options)
        task = asyncio.create_task(dispatcher.run(stopping))
        try:
            return await scenario(persist, applied)
        finally:
            stopping.set()
            await task
    return asyncio.run(main())


def test_an_idle_unwatched_dispatcher_backs_off(store):
    async def scenario(persist, applied):
        await asyncio.sleep(3)
        return persist.looks

    looks = run_dispatcher(store, scenario, watch_s=0.02, idle_poll_s=600, full_poll_s=600)
    # Doubling from 0.02 s, 3 s of idling is ~8 looks; every watch_s it would be ~150.
    assert 1 <= looks <= 15


def test_its_own_enqueue_wakes_it_at_once(store):
    """Waiting 10 minutes between looks (watch_s 600: its first look done), it
    still applies an action this process enqueues (a child session's create, an
    answer) as soon as it is committed; another process's would wait for the
    next look."""
    async def scenario(persist, applied):
        await until(lambda: persist.looks >= 1, timeout=120, what="the dispatcher's first look")
        action = await asyncio.to_thread(store.actions.enqueue, "interrupt", agent_id="a", session_id="s",
                                         payload={"guidance": "g"})
        await until(lambda: any(a["id"] == action["id"] for a in applied), timeout=300, what="the action applied")
        return action

    action = run_dispatcher(store, scenario, watch_s=600, idle_poll_s=600, full_poll_s=600)
    assert action["type"] == "interrupt"


def test_a_quiet_queue_is_not_queried_until_it_changes(store, tmp_path):
    """skip_quiet (object storage): once a look found the queue empty (nothing
    pending, nothing claimed), the full poll and the lease release, each a
    query, wait for the queue's version to move; another process's enqueue
    (a second Store: no listener of this process hears it) moves it, and the
    action is applied at the next look."""
    async def scenario(persist, applied):
        await until(lambda: persist.quiet_checks >= 1, timeout=120, what="the queue found quiet")
        polls, releases, looks = persist.full_polls, persist.releases, persist.looks
        # full_poll_s and release_every_s are 0.05 s: 40 looks at >= 0.05 s apart would each have queried
        await until(lambda: persist.looks >= looks + 40, timeout=300, what="40 more looks")
        assert (persist.full_polls, persist.releases) == (polls, releases)
        other = Store(str(tmp_path / "db"))
        try:
            action = await asyncio.to_thread(other.actions.enqueue, "interrupt", agent_id="a", session_id="s",
                                             payload={"guidance": "g"})
        finally:
            other.close()
        await until(lambda: any(a["id"] == action["id"] for a in applied), timeout=300, what="the action applied")
        return persist.full_polls - polls

    assert run_dispatcher(store, scenario, watch_s=0.02, idle_poll_s=0.05, full_poll_s=0.05, release_every_s=0.05,
                          skip_quiet=True) >= 1


def test_without_skip_quiet_the_full_poll_keeps_its_period(store):
    async def scenario(persist, applied):
        await until(lambda: persist.looks >= 3, timeout=120, what="three looks")
        polls, looks = persist.full_polls, persist.looks
        await until(lambda: persist.looks >= looks + 40, timeout=300, what="40 more looks")
        return persist.full_polls - polls, persist.quiet_checks

    polls, quiet_checks = run_dispatcher(store, scenario, watch_s=0.02, idle_poll_s=0.05, full_poll_s=0.05,
                                         release_every_s=0.05)
    assert polls >= 10 and quiet_checks == 0


def test_a_claim_whose_lease_runs_out_keeps_the_queue_from_quiet(store):
    """An action another worker claimed is open: the queue is not quiet, so the
    lease release still runs every release_every_s, puts the action back once
    its lease ran out, and this dispatcher applies it."""
    action = store.actions.enqueue("interrupt", agent_id="a", session_id="s", payload={"guidance": "g"})
    assert store.actions.claim([action["id"]], "another-worker", lease_s=1.0) == [action["id"]]

    async def scenario(persist, applied):
        await until(lambda: any(a["id"] == action["id"] for a in applied), timeout=300,
                    what="the released action applied")
        return persist.releases

    assert run_dispatcher(store, scenario, watch_s=0.02, idle_poll_s=0.05, full_poll_s=0.05, release_every_s=0.05,
                          skip_quiet=True) >= 2


def test_an_open_queue_is_counted_once_a_version(store):
    """An action that stays pending (a create the share gives another worker)
    keeps the queue open: its count is not
    repeated at every look, only when the queue's version moves."""
    store.actions.enqueue("create", agent_id="a", session_id="s", payload={"moniker": "echo"})

    class NotMine:  # the create share (runtime/dispatch/create_share.py): another worker's create
        async def mine(self, creates):
            return []

    async def scenario(persist, applied):
        await until(lambda: persist.quiet_checks >= 1, timeout=120, what="the queue counted")
        looks = persist.looks
        await until(lambda: persist.looks >= looks + 20, timeout=300, what="20 more looks")
        return persist.quiet_checks, applied

    checks, applied = run_dispatcher(store, scenario, watch_s=0.02, idle_poll_s=0.05, full_poll_s=0.05,
                                     release_every_s=0.05, skip_quiet=True, share=NotMine())
    assert checks == 1 and applied == []
