"""A session whose runner crashes because the store failed under it starts
again from its record (runtime/worker/revival.py), instead of ending in error.

Found by killing the S3 server under a running service
(tests/service/test_object_storage.py): every stepping session's runner
crashed on a failed step write; those whose error could not be saved either
stayed ``running`` in the record with no runner, owned by a live worker, so
their controls stayed queued for good.  Here the store's step write fails a
few times (as the killed server's did) and then works again."""
import asyncio

import pytest

from runtime.worker import revival
from store import Store
from tests.harness import finished, run_in_process, until


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def failing_writes(service, iterations: set[int]):
    """The store fails once the step of each of ``iterations`` is written."""
    append = service.persist.append_step

    async def append_step(row):
        if row["iteration"] in iterations:
            iterations.discard(row["iteration"])
            raise OSError("LanceError(IO): single PUT of agents/agent_steps.lance/data/x.lance failed")
        return await append(row)
    service.persist.append_step = append_step


def crash_once(service):
    """The store fails the next step write, once."""
    append, failed = service.persist.append_step, []

    async def append_step(row):
        if not failed:
            failed.append(row["iteration"])
            raise OSError("LanceError(IO): single PUT of agents/agent_steps.lance/data/x.lance failed")
        return await append(row)
    service.persist.append_step = append_step


def test_a_runner_crashed_by_a_failed_write_starts_again_from_its_record(store):
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "echo", "config": {"interval_s": 0.02}})
    ids = {}

    async def scenario(service):
        failing_writes(service, {3})
        await until(lambda: store.steps.count("s") >= 8, timeout=120, what="steps after the crash")
        ids["pause"] = store.actions.enqueue("pause", agent_id="a", session_id="s")["id"]
        await until(lambda: finished(store, ids["pause"]), timeout=120, what="the pause")

    run_in_process(store, scenario, watch_s=0.01, adopt_every_s=0.1)
    state = store.states.get("s")
    assert (state["status"], state["status_reason"]) == ("paused", "user"), state
    assert store.actions.get(ids["pause"])["status"] == "done"
    iterations = [s["iteration"] for s in store.steps.search(session_id="s", limit=1000)]
    assert sorted(iterations) == list(range(len(iterations)))  # step 3 written once, after the revival


def test_a_runner_that_keeps_crashing_ends_in_error(store, monkeypatch):
    """Not a store's blip: the same session crashing again and again, past the
    revivals allowed in the window, has its error recorded as before."""
    monkeypatch.setattr(revival, "MAX_REVIVALS", 2)
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "echo", "config": {"interval_s": 0.02}})

    async def scenario(service):
        failing = {2}
        append = service.persist.append_step

        async def append_step(row):  # every write of step 2 fails
            if row["iteration"] in failing:
                raise OSError("LanceError(IO): the disk is full")
            return await append(row)
        service.persist.append_step = append_step
        await until(lambda: (s := store.states.get("s")) and s["status"] == "error", timeout=120,
                    what="the error recorded")

    run_in_process(store, scenario, watch_s=0.01, adopt_every_s=0.1)
    state = store.states.get("s")
    assert state["status_reason"] == "runner" and "the disk is full" in state["last_error"]
    assert store.steps.count("s") == 2  # steps 0 and 1, then three lives that failed at 2


def test_an_action_claimed_before_its_runner_crashed_waits_for_the_revival(store):
    """A pause claimed while the session ran, whose handler starts only after the
    runner crashed and was dropped (the store failing: its lane kept retrying the
    attempt's record) and before the adoption round took the session back, is
    handed back to the queue and applied to the revived session: done, paused.
    It was failed "cannot pause: session s is running" (the kill loop with the
    S3 server among its victims: a resume and an inbox item)."""
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "echo", "config": {"interval_s": 0.05}})
    ids = {}

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 2, timeout=120, what="the session stepping")
        handler_may_start, adoption_may_read = asyncio.Event(), asyncio.Event()
        handle, resumable = service.dispatcher.handle, service.persist.resumable_snapshots

        async def held_handle(action):
            await handler_may_start.wait()
            return await handle(action)

        async def held_resumable(*args, **kwargs):
            if not adoption_may_read.is_set():
                raise OSError("LanceError(IO): Generic S3 error: error sending request")  # the store still down
            return await resumable(*args, **kwargs)
        service.dispatcher.handle = held_handle
        service.persist.resumable_snapshots = held_resumable
        ids["pause"] = store.actions.enqueue("pause", agent_id="a", session_id="s")["id"]
        await until(lambda: store.actions.get(ids["pause"])["status"] == "processing", timeout=120,
                    what="the pause claimed")
        crash_once(service)  # the runner crashes at its next write
        await until(lambda: service.sessions.get("s") is None, timeout=120, what="the crashed runner dropped")
        handler_may_start.set()  # its handler runs now, with no runner for the session here
        await until(lambda: store.actions.get(ids["pause"])["status"] == "pending", timeout=120,
                    what="the pause handed back")
        adoption_may_read.set()
        await until(lambda: finished(store, ids["pause"]), timeout=120, what="the pause applied")

    run_in_process(store, scenario, watch_s=0.01, adopt_every_s=0.1)
    assert store.actions.get(ids["pause"])["status"] == "done", store.actions.get(ids["pause"])
    state = store.states.get("s")
    assert (state["status"], state["status_reason"]) == ("paused", "user"), state
