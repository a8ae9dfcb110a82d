"""A replay of a parent that was woken after ``done`` runs on as its recording
did (runtime/session/replay.py ``Replayer.wake``).

Issue 37: the recording's parent finished ``done``, was woken by its child's
result and consumed it in one more step; its replay stopped at the first
``done``, so the child's result, which the recording consumed later, never
reached it.  And the wake comes before the end is saved: saving ``done`` and
waking after lost the wake to a kill in between (the kill loop)."""
import pytest

from monikers import default_registry
from store import Store, filters
from tests.harness import finished, run_in_process, until
from tools.catalog import service_registry


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def parent_frames() -> list[dict]:
    child = {"name": "spawn_agent", "args": {
        "task": "take your time", "moniker": "scripted", "name": "slow-child",
        "config": {"interval_s": 0.3, "frames": [{"text": "working"}, {"text": "the child's answer", "done": True}]}}}
    return [{"text": "asking a child", "tool_calls": [child]},
            {"text": "nothing left to do", "done": True},
            {"text": "read the child's answer", "done": True}]


def child_results(step: dict) -> list[str]:
    return [g["action_id"] for g in step.get("guidance") or [] if g.get("kind") == "child_result"]


def record_and_replay(store, saved: list[dict]) -> None:
    """The recording (a parent done, woken by its child, done again), then its
    replay run to its end; every snapshot the replay saved goes to ``saved``."""
    async def until_the_replay_is_done(service):
        await until(lambda: store.steps.count("rep") >= 3 and store.states.get("rep")["status"] == "done",
                    timeout=60, what="the replay to run as far as its recording")

    record_then_replay(store, saved, until_the_replay_is_done)


def record_then_replay(store, saved: list[dict], then) -> None:
    """The recording, then its replay's create; ``then(service)`` waits for what
    the test is about.  Every snapshot the replay saved goes to ``saved``."""
    store.actions.enqueue("create", agent_id="a", session_id="rec", payload={
        "moniker": "scripted", "task": "delegate", "config": {"interval_s": 0, "tools": ["spawn_agent"],
                                                              "frames": parent_frames()}})

    class Snapshots:
        async def snapshot_saved(self, snapshot):
            if snapshot["session_id"] == "rep":
                saved.append(dict(snapshot))

    async def scenario(service):
        service.observers.add(Snapshots())
        await until(lambda: store.steps.count("rec") >= 3 and store.states.get("rec")["status"] == "done",
                    timeout=60, what="the recording: done, woken by its child, done again")
        made = store.actions.enqueue("create", agent_id="a", session_id="rep", payload={
            "moniker": "scripted", "task": "delegate", "config": {"interval_s": 0, "tools": ["spawn_agent"],
                                                                  "frames": parent_frames()},
            "replay": {"session_id": "rec", "from_iteration": 0, "tools": "recorded", "children": "served"}})
        await until(lambda: finished(store, made["id"]), what="the replay's create")
        await then(service)

    run(store, scenario)


def run(store, scenario) -> None:
    monikers = default_registry()
    run_in_process(store, scenario, monikers=monikers, tools=service_registry(store, monikers), watch_s=0.01,
                   dead_after_s=1.0)


def adopted_and_run_on(store, what: str) -> None:
    """A new life of the service adopts the replay (its owner is gone): it runs
    its last step as its recording did, with the child's result."""
    async def until_done(service):
        await until(lambda: store.steps.count("rep") >= 3 and store.states.get("rep")["status"] == "done",
                    timeout=120, what=what)

    run(store, until_done)
    recorded, replayed = store.steps.search(session_id="rec"), store.steps.search(session_id="rep")
    assert [s["iteration"] for s in replayed] == [0, 1, 2]
    assert child_results(replayed[2]) == child_results(recorded[2])


def test_a_replay_is_woken_where_its_recording_was_and_gets_the_child_result(store):
    snapshots = []
    record_and_replay(store, snapshots)
    saved = [(s["status"], s["iteration"]) for s in snapshots]  # of every snapshot the replay saved
    recorded, replayed = store.steps.search(session_id="rec"), store.steps.search(session_id="rep")
    assert [s["status"] for s in recorded] == ["ok", "done", "done"]
    assert child_results(recorded[2]), "the recording's parent was not woken by its child"
    assert [s["iteration"] for s in replayed] == [0, 1, 2]
    assert [s["text"] for s in replayed] == [s["text"] for s in recorded]
    assert child_results(replayed[2]) == child_results(recorded[2])
    assert not store.states.children("rep"), "the replay spawned a child"
    # Woken before its end was saved: a crash between the two would leave it done for good.
    assert ("done", 1) not in saved and saved[-1] == ("done", 2), saved


def test_a_replay_whose_done_step_outran_its_snapshot_is_woken_when_adopted(store):
    """A kill between the replay's ``done`` step row and its wake left the
    snapshot one step behind: the adoption read the end from the step row and
    treated the replay as finished, never woken (the kill loop: done at [3],
    its recording went to [4]).  The adoption now does what the runner would
    have done at that end."""
    snapshots = []
    record_and_replay(store, snapshots)
    # The crash: the done step (1) is written, the wake and every later write are not.
    store.writer.delete("agent_steps", filters.all_of(filters.eq_id("session_id", "rep"),
                                                      filters.int_cmp("iteration", ">=", 2)))
    before = [s for s in snapshots if s["status"] == "running" and s["iteration"] < 1][-1]  # saved before step 1
    store.states.save(dict(before, owner="a-dead-worker"))
    assert [s["iteration"] for s in store.steps.search(session_id="rep")] == [0, 1]

    adopted_and_run_on(store, "the adopted replay to be woken and run its last step")


def test_the_background_save_does_not_save_an_end_the_wake_is_still_deciding(store, monkeypatch):
    """The long kill loop (300 kills): a replay's snapshot said ``done`` one step
    short of its recording, with no step row ahead of it to tell the adoption.
    The runner had noted the end and was reading the recording to decide the
    wake; the snapshot saver, spaced behind the steps, woke meanwhile and saved
    the memory as it was, ``done``; the kill came before the wake.  The end is
    saved by the runner once the wake has decided, never by the saver before."""
    import asyncio

    from runtime.session.agent import SessionAgent
    from runtime.session.replay import Replayer

    deciding = Replayer.wake

    async def slow_wake(self, agent):  # the recording's read, slow enough for a spaced save to come due
        await asyncio.sleep(SessionAgent.snapshot_every_s * 2 + 0.2)
        return await deciding(self, agent)

    monkeypatch.setattr(Replayer, "wake", slow_wake)
    snapshots = []
    record_and_replay(store, snapshots)
    saved = [(s["status"], s["iteration"]) for s in snapshots]
    assert ("done", 1) not in saved and saved[-1] == ("done", 2), saved


def test_a_handlers_save_does_not_save_an_end_the_wake_is_still_deciding(store, monkeypatch):
    """The same for a handler's save (a control applied while the wake reads the
    recording): it saves the session as it is, but not the end, which only the
    runner saves once the wake has decided."""
    from runtime.session.replay import Replayer

    deciding = Replayer.wake

    async def wake_beside_a_handler(self, agent):
        await agent.save()  # what a pause or an inbox item applied meanwhile does
        return await deciding(self, agent)

    monkeypatch.setattr(Replayer, "wake", wake_beside_a_handler)
    snapshots = []
    record_and_replay(store, snapshots)
    saved = [(s["status"], s["iteration"]) for s in snapshots]
    assert ("done", 1) not in saved and ("running", 1) in saved and saved[-1] == ("done", 2), saved


def test_a_replay_whose_worker_shuts_down_at_its_end_is_woken_and_runs_on_at_the_restart(store, monkeypatch):
    """The kill loop with two worker processes: a supervisor killed stops its
    workers gracefully, and a replay whose last step ended ``done`` as its
    worker shut down was not woken ("a stop was asked") and saved ``done``: a
    finished session is not adopted again, so it stayed one step short of its
    recording.  A stop for the worker's restart still wakes it: saved
    ``running`` (woken), it runs on after the restart."""
    import asyncio

    from runtime.session.replay import Replayer

    deciding, stopped = Replayer.wake, []

    async def wake_as_the_worker_shuts_down(self, agent):
        if agent.session_id == "rep" and agent.iteration == 1 and not stopped:
            stopped.append(agent.session_id)
            agent.request_stop(for_restart=True)  # what the worker's shutdown does to every session
        return await deciding(self, agent)

    monkeypatch.setattr(Replayer, "wake", wake_as_the_worker_shuts_down)
    snapshots = []

    async def until_the_stop(service):
        await until(lambda: stopped and (a := service.sessions.get("rep")) is not None and a.runner.done(),
                    timeout=60, what="the replay's runner to stop at its first end")
        await asyncio.sleep(0)

    record_then_replay(store, snapshots, until_the_stop)
    saved = [(s["status"], s["status_reason"], s["iteration"]) for s in snapshots]
    assert ("done", "done", 1) not in saved and saved[-1] == ("running", "woken", 1), saved
    store.states.save(dict(store.states.get("rep"), owner="a-dead-worker"))  # the restart: adopted again

    adopted_and_run_on(store, "the replay to run on after the restart")
