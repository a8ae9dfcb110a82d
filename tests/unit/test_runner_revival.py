"""A session whose runner crashes because the store failed under it starts
again from its record (runtime/worker/revival.py), instead of ending in error.

Found by killing the S3 server under a running service
(tests/service/test_object_storage.py): every stepping session's runner
crashed on a failed step write; those whose error could not be saved either
stayed ``running`` in the record with no runner, owned by a live worker, so
their controls stayed queued for good.  Here the store's step write fails a
few times (as the killed server's did) and then works again."""
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
