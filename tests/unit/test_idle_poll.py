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
    """The store's persistence as on object storage: no watch; counts the looks."""

    def __init__(self, store):
        super().__init__(store)
        self.looks = 0

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
