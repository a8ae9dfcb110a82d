"""Attempts count what was tried (runtime/dispatch/dispatcher.py, store/actions.py), and
an action applied again after it took effect ends done (runtime/dispatch/handlers.py).

Issue 37: a claim added 1 to ``attempts`` for every action of its batch while
a lane applied them one at a time, so after a few restarts a backlog was parked
``failed`` without ever having run; and actions whose effect was recorded were
later reported failed.  Here a "worker that dies" is a dispatcher whose lanes
are cancelled (a kill writes nothing more) and whose claims are handed back as
a restart does (``release_claims_of``).  tests/unit/test_action_effects.py
has the handlers' side."""
import asyncio

import pytest

from runtime.dispatch.dispatcher import Dispatcher
from runtime.base.persistence import Persistence
from store import Store, filters
from tests.harness import finished, until


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def backlog(store: Store, n: int, session_id: str = "s") -> list[str]:
    return [store.actions.enqueue("interrupt", agent_id="a", session_id=session_id,
                                  payload={"guidance": f"g{i}"})["id"] for i in range(n)]


async def a_life_that_dies(store: Store, worker_id: str, hangs: str, **options) -> None:
    """A worker claims the queue, its lane starts on ``hangs`` (which never
    returns), and the worker dies there; its claims go back to pending."""
    started = asyncio.Event()

    async def handle(action):
        if action["id"] == hangs:
            started.set()
            await asyncio.Event().wait()

    dispatcher = Dispatcher(Persistence(store), handle, worker_id=worker_id, **options)
    await dispatcher.poll_once()
    await asyncio.wait_for(started.wait(), timeout=90)
    for task in list(dispatcher.lane_tasks.values()):  # kill -9: nothing more is written
        task.cancel()
    await asyncio.gather(*dispatcher.lane_tasks.values(), return_exceptions=True)
    await asyncio.to_thread(store.actions.release_claims_of, [worker_id])


async def a_life_that_lives(store: Store, worker_id: str, ids: list[str], handle, **options) -> None:
    dispatcher = Dispatcher(Persistence(store), handle, worker_id=worker_id, **options)
    await dispatcher.poll_once()
    await until(lambda: all(finished(store, i) for i in ids), timeout=60, what="every action to finish")


def test_a_backlog_behind_a_crashing_handler_is_tried_not_parked(store):
    """Lives die on the first action of a session's lane: that action is tried
    each time (alone once its worker has died during it) and is parked after
    five lone attempts, saying so; the five behind it were claimed seven times
    but never tried, and each runs once."""
    ids = backlog(store, 6)
    ran = []

    async def handle(action):
        ran.append(action["id"])

    async def scenario():
        for life in range(6):
            await a_life_that_dies(store, f"w{life}", hangs=ids[0], max_attempts=5)
        untried = [store.actions.get(i) for i in ids[1:]]
        assert [a["attempts"] for a in untried] == [0] * 5, "a claim counted as an attempt"
        await a_life_that_lives(store, "w6", ids, handle, max_attempts=5)

    asyncio.run(scenario())
    first, rest = store.actions.get(ids[0]), [store.actions.get(i) for i in ids[1:]]
    assert [(a["status"], a["attempts"]) for a in rest] == [("done", 1)] * 5, rest
    assert ran == ids[1:], "the parked action ran again, or the others not once each in order"
    error = first["error"]
    assert first["status"] == "failed" and first["attempts"] == 6
    assert error.startswith("parked after 5 attempts: #1 started by w0 at "), error
    assert error.count("its worker stopped before it ended") == 6 and error.count("not counted") == 1
    assert [f"#{n} started alone by w{n - 1}" in error for n in range(2, 7)] == [True] * 5, error


def test_an_action_cut_beside_a_crashing_one_runs_alone_and_is_not_parked(store):
    """A worker dies whenever one action runs (the poison), taking down the
    action of another lane that runs beside it (which ends only when nothing
    runs beside it).  Tried alone, the other is done; the poison, which kills
    its worker when alone too, is parked."""
    (poison,), (innocent,) = backlog(store, 1, "s1"), backlog(store, 1, "s2")

    async def life(worker_id: str) -> None:
        poisoned, cut = asyncio.Event(), asyncio.Event()

        async def handle(action):
            gate = getattr(dispatcher, "gate", None)
            alone = gate is not None and gate.alone_running
            if action["id"] == poison:
                poisoned.set()
                await asyncio.Event().wait()  # the worker dies here
            if not alone:
                cut.set()
                await asyncio.Event().wait()  # ...with this one, which runs beside it, under way

        dispatcher = Dispatcher(Persistence(store), handle, worker_id=worker_id, max_attempts=2)
        await dispatcher.poll_once()
        await until(lambda: (poisoned.is_set() and (cut.is_set() or dispatcher.gate.alone_running))
                    or (finished(store, innocent) and finished(store, poison)), timeout=30, what="the poison to run")
        for task in list(dispatcher.lane_tasks.values()):  # kill -9
            task.cancel()
        await asyncio.gather(*dispatcher.lane_tasks.values(), return_exceptions=True)
        await asyncio.to_thread(store.actions.release_claims_of, [worker_id])

    async def scenario():
        for n in range(8):
            if finished(store, poison) and finished(store, innocent):
                return n
            await life(f"w{n}")
        raise AssertionError("never settled")

    lives = asyncio.run(scenario())
    assert store.actions.get(innocent)["status"] == "done", store.actions.get(innocent)
    parked = store.actions.get(poison)
    assert parked["status"] == "failed" and parked["error"].startswith("parked after 2 attempts"), parked
    assert lives <= 5


def test_an_attempt_is_durable_before_its_handler_runs(store):
    """Counted when the handler starts: by the claim for the first of an idle
    lane, by the lane for the one behind it; each before its handler ran."""
    ids = backlog(store, 2)
    seen = {}

    async def handle(action):
        seen[action["id"]] = store.actions.get(action["id"])["attempts"]

    asyncio.run(a_life_that_lives(store, "w", ids, handle))
    assert seen == {ids[0]: 1, ids[1]: 1}
    assert [store.actions.get(i)["error"] for i in ids] == [None, None]  # done: the record is cleared


def test_a_raising_handler_is_tried_again_in_its_lane_then_parked_with_what_each_attempt_raised(store):
    flaky, broken, after = backlog(store, 3)
    calls = {}

    async def handle(action):
        calls[action["id"]] = calls.get(action["id"], 0) + 1
        if action["id"] == broken or (action["id"] == flaky and calls[flaky] < 3):
            raise RuntimeError(f"boom {calls[action['id']]}")

    asyncio.run(a_life_that_lives(store, "w", [flaky, broken, after], handle, max_attempts=3, retry_after_s=0.01))
    got = {i: store.actions.get(i) for i in (flaky, broken, after)}
    assert (got[flaky]["status"], got[flaky]["attempts"], calls[flaky]) == ("done", 3, 3)
    assert (got[broken]["status"], got[broken]["attempts"], calls[broken]) == ("failed", 3, 3)
    error = got[broken]["error"]
    assert error.startswith("parked after 3 attempts: #1 started by w at "), error
    assert [f"raised RuntimeError: boom {n}" in error for n in (1, 2, 3)] == [True] * 3, error
    assert got[after]["status"] == "done" and calls[after] == 1
    order = [got[i]["processed_at"] for i in (flaky, broken, after)]
    assert order == sorted(order), "the lane's order was not kept while it retried"


def test_an_action_whose_attempts_never_ended_but_took_effect_is_done_not_parked(store):
    (applied, not_applied) = backlog(store, 2)
    record = "".join(f"started alone by w{n} at 2026-11-27T10:00:0{n}.000000000\n" for n in range(5))
    for action_id in (applied, not_applied):
        store.writer.update("actions", filters.eq_id("id", action_id), {"attempts": 5, "error": record})

    async def took_effect(action):
        return action["id"] == applied

    async def handle(action):
        raise AssertionError("a parked action's handler must not run")

    asyncio.run(a_life_that_lives(store, "w", [applied, not_applied], handle, took_effect=took_effect))
    assert store.actions.get(applied)["status"] == "done"
    parked = store.actions.get(not_applied)
    assert parked["status"] == "failed" and parked["error"].startswith("parked after 5 attempts: #1 started alone by w0")


def refused_twice(call, action_id: str, refusals: list):
    """``call`` (a queue write of Persistence), refused twice for ``action_id``
    as a failing store refuses it, then passed through."""
    async def refusing(first_arg, *args):
        if first_arg == action_id and len(refusals) < 2:
            refusals.append(first_arg)
            raise OSError("the store went away")
        return await call(first_arg, *args)
    return refusing


def test_an_action_whose_attempt_could_not_be_recorded_is_not_failed_nor_overtaken(store):
    """The queue refused to record the start (storage failing): the handler must
    not run, the action is not failed untried, and the session's later actions
    wait behind it (left to its lease, it was applied after a pause accepted
    later): its lane tries again until the queue records it."""
    (first, second, third) = backlog(store, 3)
    ran = []

    async def handle(action):
        ran.append(action["id"])

    async def main():
        persist, refusals = Persistence(store), []
        # the second's start is its own commit (the first's rides on the claim)
        persist.start_attempt = refused_twice(persist.start_attempt, second, refusals)
        dispatcher = Dispatcher(persist, handle, worker_id="w", retry_after_s=0.05)
        await dispatcher.poll_once()
        await until(lambda: all(finished(store, i) for i in (first, second, third)) and not dispatcher.in_flight,
                    timeout=60, what="the lane to end")
        return refusals

    assert asyncio.run(main()) == [second, second]
    assert ran == [first, second, third]
    for action_id in (first, second, third):
        done = store.actions.get(action_id)
        assert (done["status"], done["attempts"]) == ("done", 1), done


def test_an_action_whose_finish_could_not_be_recorded_is_finished_before_the_next_one_runs(store):
    """The handler ran, then the queue refused to mark the action finished (the
    store failing): left to its lease, it was applied again after the session's
    later actions (a pause re-applied after the resume that followed it).  Its
    lane now tries the finish again before the next action runs."""
    (first, second) = backlog(store, 2)
    ran, order = [], []

    async def handle(action):
        ran.append(action["id"])

    async def main():
        persist, refusals = Persistence(store), []
        finish_action = refused_twice(persist.finish_action, first, refusals)

        async def finish_in_order(action_id, *args):
            finished_now = await finish_action(action_id, *args)
            order.append(action_id)
            return finished_now
        persist.finish_action = finish_in_order
        dispatcher = Dispatcher(persist, handle, worker_id="w", retry_after_s=0.05)
        await dispatcher.poll_once()
        await until(lambda: finished(store, first) and finished(store, second) and not dispatcher.in_flight,
                    timeout=60, what="the lane to end")
        return refusals

    assert asyncio.run(main()) == [first, first]
    assert ran == [first, second] and order == [first, second]


def destroy_held_by_w1_then_a_pause(store: Store) -> tuple[str, str, str]:
    """A destroy of session "gone" claimed by worker w1 (which dies, or is slow), a
    pause of "gone" accepted after it, and a pause of another session (the positive
    control): their ids."""
    destroy = store.actions.enqueue("destroy", agent_id="a", session_id="gone")["id"]
    assert store.actions.claim([destroy], "w1", 60) == [destroy]
    pause = store.actions.enqueue("pause", agent_id="a", session_id="gone")["id"]
    other = store.actions.enqueue("pause", agent_id="b", session_id="elsewhere")["id"]
    return destroy, pause, other


def recorded():
    """A handler that notes each action it is given, and the list it notes them in."""
    applied = []

    async def handle(action):
        applied.append(action["id"])
    return applied, handle


def test_an_action_of_a_session_nobody_runs_waits_behind_one_claimed_by_another_worker(store):
    """Actions of a finished or unknown session are anyone's to answer; with two
    workers (agents.py --processes 2) a pause was answered by one while the
    destroy accepted before it was still claimed by the other (killed, and its
    claim finished later): the session's actions ran out of acceptance order."""
    destroy, pause, other = destroy_held_by_w1_then_a_pause(store)
    applied, handle = recorded()

    async def scenario():
        dispatcher = Dispatcher(Persistence(store), handle, worker_id="w2")
        await dispatcher.poll_once()
        await until(lambda: finished(store, other), timeout=60, what="the other session's pause")
        assert pause not in applied and not finished(store, pause), "it overtook the destroy claimed by w1"
        store.actions.finish(destroy, ok=True)  # w1's claim ends
        await dispatcher.poll_once()
        await until(lambda: finished(store, pause), timeout=60, what="the pause, once the destroy finished")

    asyncio.run(scenario())
    assert applied == [other, pause]


def test_an_action_of_a_session_nobody_runs_waits_behind_one_handed_back_while_it_was_looked_at(store):
    """The same two workers, a moment later: the killed worker's restart hands its
    claim of the destroy back to the queue after this worker read the pending
    actions (the destroy was claimed then, so not among them) and before it looked
    for claims elsewhere (none by then).  The destroy was in neither look, and the
    pause accepted after it was answered first (a whole run: test_processes' crash
    harness, "pause ... finished before the destroy accepted earlier")."""
    destroy, pause, other = destroy_held_by_w1_then_a_pause(store)
    applied, handle = recorded()

    class HandedBackMeanwhile(Persistence):
        async def pending_actions(self, limit):
            pending = await super().pending_actions(limit)
            await asyncio.to_thread(store.actions.release_claims_of, ["w1"])  # w1's restart, just then
            return pending

    async def scenario():
        dispatcher = Dispatcher(HandedBackMeanwhile(store), handle, worker_id="w2")
        await dispatcher.poll_once()
        await until(lambda: finished(store, other), timeout=60, what="the other session's pause")
        assert pause not in applied, "the pause overtook the destroy handed back meanwhile"
        await dispatcher.poll_once()
        await until(lambda: finished(store, pause), timeout=60, what="the destroy, then the pause")

    asyncio.run(scenario())
    assert applied == [other, destroy, pause]
