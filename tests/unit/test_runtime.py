"""runtime/ in one process: ordering, bad actions, reconciliation, destroy."""
import asyncio
import threading
import time
from datetime import datetime, timezone

import pytest

from runtime.base.agent_core import AgentBase, InterruptMixin, PauseMixin, StopMixin
from runtime.session.agent import SessionAgent
from store import Store
from tests.harness import finished, run_in_process, until


@pytest.fixture
def store(tmp_path):
    return Store(str(tmp_path / "db"))


def with_service(store, scenario, **options):
    return run_in_process(store, scenario, **options)


def test_mixins_chain_their_init():
    class Agent(PauseMixin, InterruptMixin, StopMixin, AgentBase):
        pass
    agent = Agent()
    assert not agent.pause_requested and not agent.stop_requested and agent.pending_guidance == []
    assert agent.add_inbox_item("a1", "guidance", "x") and not agent.add_inbox_item("a1", "guidance", "x")  # once


def test_actions_of_one_session_apply_in_the_order_accepted(store):
    store.actions.enqueue("create", agent_id="a", session_id="s", payload={"moniker": "echo",
                          "config": {"interval_s": 0.01}})
    verbs = ["pause", "interrupt", "resume", "interrupt", "pause", "resume", "interrupt", "pause"]
    ids = [store.actions.enqueue(v, agent_id="a", session_id="s",
                                 payload={"guidance": f"g{i}"} if v == "interrupt" else {})["id"]
           for i, v in enumerate(verbs)]

    async def scenario(service):
        for action_id in ids:
            await until(lambda: finished(store, action_id), what=action_id)

    with_service(store, scenario)
    actions = [store.actions.get(i) for i in ids]
    assert all(a["status"] == "done" for a in actions), [(a["type"], a["error"]) for a in actions]
    processed = [a["processed_at"] for a in actions]
    assert processed == sorted(processed), "actions of one session applied out of order"
    assert store.states.get("s")["status"] == "paused"  # the last action wins
    heard = [g["text"] for s in store.steps.search(session_id="s") for g in (s["guidance"] or [])]
    # The last pause may apply before a step has run after g6 (under load 11 it did):
    # g6 then waits, queued, for the resume; it is never lost nor heard twice.
    queued = [g["text"] for g in store.states.get("s").get("pending_guidance") or []]
    assert heard + queued == ["g1", "g3", "g6"]  # every guidance delivered once, in order


def test_bad_actions_always_finish_failed_and_the_service_carries_on(store):
    now = datetime.now(timezone.utc)
    raw = [  # written past the enqueue helper's checks, as a buggy or hostile writer might
        {"type": "explode", "payload": "{}"},
        {"type": "interrupt", "payload": "not json"},
        {"type": "interrupt", "payload": "[1, 2]"},
        {"type": "create", "payload": '{"moniker": "no-such"}'},
        {"type": "create", "payload": '{"moniker": "joke", "config": {"interval_s": -5}}'},
        {"type": "pause", "payload": "{}", "session_id": "never-created"},
        {"type": "pause", "payload": "{}", "agent_id": None, "session_id": None},
    ]
    rows = [{"id": f"bad{i}", "created_at": now, "agent_id": "a", "session_id": f"bad-s{i}", "priority": 0,
             "status": "pending", "processed": False, "attempts": 0, **r} for i, r in enumerate(raw)]
    store.writer.append("actions", rows)
    good = store.actions.enqueue("create", agent_id="a", session_id="good", payload={"moniker": "countdown",
                                 "config": {"interval_s": 0, "n": 2}})

    async def scenario(service):
        for row in rows:
            await until(lambda: finished(store, row["id"]), what=row["id"])
        await until(lambda: (s := store.states.get("good")) and s["status"] == "done", what="good session")

    with_service(store, scenario)
    for row in rows:
        action = store.actions.get(row["id"])
        assert action["status"] == "failed" and action["error"], (row, action)
        assert action["processed"] is True
    assert store.actions.get(good["id"])["status"] == "done"


def test_rehydrate_reconciles_a_crash_between_step_and_snapshot(store):
    """The snapshot says iteration 1 but step 2 was persisted: resume at 3, not 2."""
    created = datetime.now(timezone.utc)
    store.states.save({"session_id": "s", "agent_id": "a", "moniker": "joke", "task": "cats",
                       "config": {"interval_s": 0.01}, "status": "running", "iteration": 1, "step_token": "1",
                       "next_step_token": "2", "state": {"subject": "cats", "told": 2}, "created_at": created,
                       "pending_guidance": [{"action_id": "g-used", "text": "about dogs"},
                                            {"action_id": "g-new", "text": "about owls"}]})
    for i in range(3):
        store.steps.append({"agent_id": "a", "session_id": "s", "iteration": i, "step_token": str(i),
                            "next_step_token": str(i + 1), "status": "ok",
                            "state": {"subject": "dogs" if i == 2 else "cats", "told": i + 1},
                            "guidance": [{"action_id": "g-used", "text": "about dogs"}] if i == 2 else None})

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 6, what="resumed steps")

    with_service(store, scenario)
    steps = store.steps.search(session_id="s")
    assert [s["iteration"] for s in steps] == list(range(len(steps)))
    assert steps[3]["state"]["told"] == 4  # continued from step 2's state
    assert [g["action_id"] for g in steps[3]["guidance"]] == ["g-new"]  # used guidance not redelivered
    assert "owls" in steps[3]["text"]


def test_reconcile_marks_an_error_step_newer_than_the_snapshot():
    snap = {"session_id": "s", "agent_id": "a", "iteration": 0, "status": "running", "config": {}}
    fixed, interrupted = SessionAgent.reconcile(snap, [{"iteration": 1, "status": "error", "error": "boom"}])
    assert fixed["status"] == "error" and fixed["last_error"] == "boom" and fixed["iteration"] == 1
    assert interrupted is None
    assert SessionAgent.reconcile(snap, [{"iteration": 0, "status": "ok"}]) == (snap, None)


def test_reconcile_folds_every_step_newer_than_the_snapshot():
    """The snapshot is saved behind the steps: a crash can leave it several
    steps back, and each of them counts (usage, guidance used, state)."""
    snap = {"session_id": "s", "agent_id": "a", "iteration": 2, "status": "running", "config": {},
            "state": {"n": 2}, "usage": {"input_tokens": 20, "calls": 2},
            "pending_guidance": [{"action_id": "g1", "text": "one"}, {"action_id": "g2", "text": "two"}]}

    def step(i, guidance=None):
        return {"iteration": i, "status": "ok", "step_token": str(i), "next_step_token": str(i + 1),
                "state": {"n": i}, "text": f"t{i}", "usage": {"input_tokens": 10, "calls": [{}]},
                "guidance": guidance}

    newer = [step(5), step(3, [{"action_id": "g1"}]), step(4, [{"action_id": "g2"}])]  # any order
    fixed, interrupted = SessionAgent.reconcile(snap, newer)
    assert interrupted is None
    assert fixed["iteration"] == 5 and fixed["state"] == {"n": 5} and fixed["next_step_token"] == "6"
    assert fixed["usage"]["input_tokens"] == 50 and fixed["usage"]["calls"] == 5
    assert fixed["pending_guidance"] == [] and fixed["used_guidance"] == ["g1", "g2"]


def test_reconcile_records_a_step_in_flight_as_interrupted_and_tells_the_next_step():
    snap = {"session_id": "s", "agent_id": "a", "iteration": 4, "status": "running", "config": {},
            "next_step_token": "5", "state": {"k": 1}, "step_started_at": "2026-01-01T00:00:00Z",
            "pending_guidance": [{"action_id": "g1", "text": "hurry"}]}
    fixed, interrupted = SessionAgent.reconcile(snap, [])
    assert interrupted["iteration"] == 5 and interrupted["status"] == "interrupted"
    assert interrupted["step_token"] == "5" and "outcome unknown" in interrupted["error"]
    assert fixed["iteration"] == 5 and fixed["next_step_token"] == "5" and fixed["step_started_at"] is None
    texts = [g["text"] for g in fixed["pending_guidance"]]
    assert texts[0] == "hurry" and "interrupted" in texts[1]


def test_destroy_cancels_a_hung_step_after_the_grace_period(store):
    from monikers import Moniker, default_registry
    hanging = threading.Event()

    async def hang_step(frame, ctx):
        hanging.set()
        await asyncio.sleep(3600)

    monikers = default_registry()
    monikers.register(Moniker("hang", hang_step))
    made = store.actions.enqueue("create", agent_id="a", session_id="hung", payload={
        "moniker": "hang", "config": {"interval_s": 0, "step_timeout_s": 600}})

    async def scenario(service):
        await until(lambda: finished(store, made["id"]), what="create")
        await until(hanging.is_set, what="the step to hang")
        destroy = store.actions.enqueue("destroy", agent_id="a", session_id="hung")
        started = time.monotonic()
        await until(lambda: finished(store, destroy["id"]), what="destroy")
        return time.monotonic() - started

    took = run_in_process(store, scenario, monikers=monikers, destroy_grace_s=0.3)
    snap = store.states.get("hung")
    assert snap["status"] == "stopped" and snap["status_reason"] == "destroyed"
    assert took < 10
    assert store.steps.count("hung") == 0  # the cancelled step left no row


def test_shutdown_leaves_sessions_resumable(store):
    store.actions.enqueue("create", agent_id="a", session_id="s", payload={"moniker": "joke",
                          "config": {"interval_s": 0.01}})

    async def scenario(service):
        await until(lambda: store.steps.count("s") >= 3, what="steps")

    with_service(store, scenario)
    assert store.states.get("s")["status"] == "running"
    before = store.steps.count("s")
    with_service(store, lambda service: until(lambda: store.steps.count("s") >= before + 3, what="more steps"))
    steps = store.steps.search(session_id="s")
    assert [s["iteration"] for s in steps] == list(range(len(steps)))


def test_observers_see_durable_events_and_a_failing_one_breaks_nothing(store):
    seen = []

    class Recorder:
        async def session_created(self, snapshot):
            seen.append(("created", snapshot["session_id"]))

        async def step_persisted(self, snapshot, step):
            assert store.steps.count(step["session_id"]) >= step["iteration"] + 1  # durable already
            seen.append(("step", step["iteration"]))

        async def action_finished(self, action, ok, error):
            seen.append(("action", action["type"], ok))

    class Broken:
        async def step_persisted(self, snapshot, step):
            raise RuntimeError("observer bug")

    store.actions.enqueue("create", agent_id="a", session_id="s", payload={"moniker": "countdown",
                          "config": {"interval_s": 0, "n": 3}})

    async def scenario(service):
        service.observers.add(Broken())
        service.observers.add(Recorder())
        await until(lambda: (s := store.states.get("s")) and s["status"] == "done", what="done")
        await until(lambda: ("action", "create", True) in seen, what="action event")

    with_service(store, scenario)
    assert ("created", "s") in seen
    assert [e[1] for e in seen if e[0] == "step"] == [0, 1, 2]


def test_guidance_sent_to_a_failed_session_waits_for_its_resume(store):
    store.actions.enqueue("create", agent_id="a", session_id="f", payload={
        "moniker": "chaos", "config": {"interval_s": 0, "fail_at": 2, "mode": "raise"}})

    async def scenario(service):
        await until(lambda: (s := store.states.get("f")) and s["status"] == "error", what="error")
        told = store.actions.enqueue("interrupt", agent_id="a", session_id="f", payload={"guidance": "try again"})
        await until(lambda: finished(store, told["id"]), what="interrupt")
        assert store.actions.get(told["id"])["status"] == "done"
        store.actions.enqueue("resume", agent_id="a", session_id="f")
        await until(lambda: store.steps.count("f") == 3, what="retried step")

    with_service(store, scenario)
    retried = store.steps.search(session_id="f")[-1]
    assert [g["text"] for g in retried["guidance"]] == ["try again"]


def test_a_restarted_worker_hands_back_its_own_stranded_claims_at_once(store):
    """Its previous life died holding actions; they must apply now, in order,
    not when their lease runs out."""
    store.actions.enqueue("create", agent_id="a", session_id="s", payload={"moniker": "echo",
                          "config": {"interval_s": 0.01}})
    with_service(store, lambda service: until(lambda: store.steps.count("s") >= 1, what="a step"),
                 worker_id="host-0")
    stranded = store.actions.enqueue("pause", agent_id="a", session_id="s")
    assert store.actions.claim([stranded["id"]], "host-0", lease_s=600) == [stranded["id"]]
    later = store.actions.enqueue("resume", agent_id="a", session_id="s")

    async def scenario(service):
        await until(lambda: finished(store, later["id"]), what="the later action", timeout=10)

    with_service(store, scenario, worker_id="host-0")
    first, second = store.actions.get(stranded["id"]), store.actions.get(later["id"])
    assert first["status"] == "done" and first["processed_at"] <= second["processed_at"]
    assert store.states.get("s")["status"] == "running"  # pause, then resume: in that order


def test_an_interrupt_applied_again_after_a_crash_reaches_no_second_step(store):
    """A crash after a step used the guidance but before the action was marked
    done makes the action apply again; its guidance must not be used twice."""
    store.actions.enqueue("create", agent_id="a", session_id="g", payload={"moniker": "echo",
                          "config": {"interval_s": 0.02}})
    told = store.actions.enqueue("interrupt", agent_id="a", session_id="g", payload={"guidance": "only once"})

    def used_by():
        return [s["iteration"] for s in store.steps.search(session_id="g", limit=1000)
                if any(g["action_id"] == told["id"] for g in (s["guidance"] or []))]

    async def scenario(service):
        await until(lambda: used_by() and finished(store, told["id"]), what="guidance used")
        store.writer.update("actions", f"id = '{told['id']}'", {"status": "pending", "processed": False})
        await until(lambda: finished(store, told["id"]), what="applied again")
        before = store.steps.count("g")
        await until(lambda: store.steps.count("g") >= before + 5, what="more steps")

    with_service(store, scenario)
    assert len(used_by()) == 1
    assert told["id"] in store.states.get("g")["used_guidance"]


class GatedSnapshots:
    """Step rows commit at once; each snapshot commit waits until the test lets it through."""

    def __init__(self):
        self.steps, self.snapshots, self.gate = [], [], asyncio.Semaphore(0)
        self.in_flight = self.most_in_flight = 0

    async def append_step(self, row):
        self.steps.append(row["iteration"])
        return row

    async def save_snapshot(self, row):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await self.gate.acquire()
        self.in_flight -= 1
        self.snapshots.append(row["iteration"])


def test_a_step_never_waits_for_a_snapshot_and_saves_are_coalesced():
    """The snapshot is saved behind the steps: a stuck snapshot commit does not
    hold the steps up, at most one save is in flight, and the save after it
    writes the memory as it is then (skipping the steps in between)."""
    from monikers import default_registry

    async def scenario():
        persist = GatedSnapshots()
        agent = SessionAgent(moniker=default_registry().get("echo"), persist=persist, snapshot={
            "agent_id": "a", "session_id": "s", "status": "running", "iteration": -1,
            "config": {"interval_s": 0}, "created_at": datetime.now(timezone.utc)})
        agent.start()
        await until(lambda: len(persist.steps) >= 5, timeout=90, what="steps past a stuck snapshot")
        assert persist.snapshots == [] and persist.in_flight == 1
        persist.gate.release()  # the first save lands; the next one writes the newest memory
        await until(lambda: persist.snapshots == [0] and persist.in_flight == 1, timeout=90, what="second save")
        stepped = len(persist.steps)
        persist.gate.release()
        await until(lambda: len(persist.snapshots) == 2, timeout=90, what="second save landed")
        assert 1 < persist.snapshots[1] < stepped  # not the step after the first: the newest then
        agent.request_stop()
        for _ in range(10):
            persist.gate.release()
        await asyncio.wait_for(agent.runner, 5)
        assert persist.most_in_flight == 1
        assert persist.snapshots[-1] == persist.steps[-1]  # the runner left nothing in flight

    asyncio.run(scenario())


class CountedSnapshots:
    """Step rows and snapshots commit at once, each kept (the store cannot be slower than this)."""

    def __init__(self):
        self.steps, self.snapshots = [], []

    async def append_step(self, row):
        self.steps.append(row["iteration"])
        return row

    async def save_snapshot(self, row):
        self.snapshots.append((row["iteration"], row["status"], row["status_reason"]))


def test_snapshots_of_a_fast_session_are_spaced_and_its_end_is_saved_at_once():
    """Saved behind the steps, a snapshot is written at most every
    ``snapshot_every_s`` while the session steps; a change of status (its end)
    is written at once, and the last one holds the last step."""
    from monikers import default_registry

    async def scenario():
        persist = CountedSnapshots()
        agent = SessionAgent(moniker=default_registry().get("echo"), persist=persist, snapshot={
            "agent_id": "a", "session_id": "s", "status": "running", "iteration": -1,
            "config": {"interval_s": 0, "max_steps": 300}, "created_at": datetime.now(timezone.utc)})
        agent.snapshot_every_s = 3600  # only the first save and the end's may be written
        agent.start()
        await asyncio.wait_for(agent.runner, 120)
        assert len(persist.steps) == 300
        assert persist.snapshots[-1] == (299, "done", "max_steps")
        assert len(persist.snapshots) <= 3, persist.snapshots

    asyncio.run(scenario())


def test_a_session_ending_in_error_is_saved_once_with_nothing_after_it():
    """A save made for a change of status holds every step so far: the save
    left waiting behind the steps is not written after it (CI: a fork test saw
    the failed session's snapshot change after it had ended)."""
    from monikers.frame import FrameOut, Moniker

    async def step(frame, ctx):
        if ctx.iteration == 3:
            raise RuntimeError("boom")
        return FrameOut(step=frame.step, next_step=frame.step, state={}, text="ok")

    async def scenario():
        persist = CountedSnapshots()
        agent = SessionAgent(moniker=Moniker("fails", step), persist=persist, snapshot={
            "agent_id": "a", "session_id": "s", "status": "running", "iteration": -1,
            "config": {"interval_s": 0}, "created_at": datetime.now(timezone.utc)})
        agent.snapshot_every_s = 3600
        agent.start()
        await asyncio.wait_for(agent.runner, 60)
        assert persist.steps == [0, 1, 2, 3]
        assert persist.snapshots[-1][:2] == (3, "error")
        assert [s for s in persist.snapshots if s[1] == "error"] == [persist.snapshots[-1]]

    asyncio.run(scenario())


class KeptInMemory:
    """Step rows and snapshots commit at once, in memory."""

    def __init__(self):
        self.steps = []

    async def append_step(self, row):
        self.steps.append(row)
        return row

    async def save_snapshot(self, row):
        pass


def test_an_inbox_item_that_arrives_while_a_step_runs_wakes_the_sleep_after_it():
    """The orchestrator's follow-up that never came (CI, stop 18): a child's
    result arrived while the parent's step ran, and the sleep after the step
    forgot the wake-up, so the result waited the whole ``interval_s`` (300 s)."""
    from monikers.frame import FrameOut, Moniker

    agent = None

    async def step(frame, ctx):
        if ctx.iteration == 0:  # arrives mid-step: after this step read its inbox
            agent.add_inbox_item("late-1", "child_result", "the late result")
        return FrameOut(step=frame.step, next_step=frame.step, state={}, text=f"saw {len(frame.inbox)}")

    async def scenario():
        nonlocal agent
        persist = KeptInMemory()
        agent = SessionAgent(moniker=Moniker("listener", step), persist=persist, snapshot={
            "agent_id": "a", "session_id": "s", "status": "running", "iteration": -1,
            "config": {"interval_s": 300}, "created_at": datetime.now(timezone.utc)})
        agent.start()
        await until(lambda: len(persist.steps) >= 2, timeout=90, what="the step that takes the late item")
        agent.request_stop()
        await asyncio.wait_for(agent.runner, 5)
        return persist.steps

    steps = asyncio.run(scenario())
    assert [s["text"] for s in steps] == ["saw 0", "saw 1"]  # and no step without a reason


def test_an_idle_dispatcher_wakes_on_a_commit_not_on_its_timer(store):
    """With every timer a minute away, only the commit watch can wake it."""
    async def scenario(service):
        await asyncio.sleep(0.5)  # let the poller go idle
        made = store.actions.enqueue("create", agent_id="a", session_id="w", payload={"moniker": "countdown",
                                     "config": {"interval_s": 0, "n": 1}})
        return await until(lambda: finished(store, made["id"]), timeout=90, what="create")

    assert with_service(store, scenario, watch_s=60.0, idle_watch_s=60.0, full_poll_s=60.0)["status"] == "done"


def test_a_session_that_rests_between_steps_has_its_snapshot_saved_before_it_rests():
    """Spacing the saves helps sessions that step fast; one that sleeps a
    second or more after a step has its snapshot (usage, iteration) saved first,
    so what readers see matches its steps while it rests."""
    from monikers import default_registry

    async def scenario():
        persist = CountedSnapshots()
        agent = SessionAgent(moniker=default_registry().get("echo"), persist=persist, snapshot={
            "agent_id": "a", "session_id": "s", "status": "running", "iteration": -1,
            "config": {"interval_s": 3600}, "created_at": datetime.now(timezone.utc)})
        agent.snapshot_every_s = 3600  # spaced: the save after step 0 would wait an hour
        await agent.save()  # (as a create does)
        agent.start()
        await until(lambda: persist.steps == [0] and persist.snapshots and persist.snapshots[-1][0] == 0,
                    timeout=30, what="the snapshot of step 0 before the rest")
        agent.request_stop()
        await asyncio.wait_for(agent.runner, 30)

    asyncio.run(scenario())


class GatedToolRows(CountedSnapshots):
    """Tool call rows commit only when the gate opens; each snapshot notes
    which of them had landed when it was written."""

    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()
        self.tool_rows: dict[str, str] = {}
        self.landed_at_snapshot = []

    async def save_snapshot(self, row):
        await super().save_snapshot(row)
        self.landed_at_snapshot.append((row["iteration"], dict(self.tool_rows)))

    async def save_tool_calls(self, rows, new=False):
        await self.gate.wait()
        self.tool_rows.update({r["id"]: r["status"] for r in rows})


def test_a_tool_steps_ended_rows_land_beside_the_next_step_and_before_any_snapshot_after_it():
    """runtime/session/agent.py tool_rows_landed: the step after a tool call commits
    without waiting for the call's ended row, and no snapshot that says the tool
    step is over is written before that row landed."""
    from pydantic import BaseModel

    from monikers.frame import FrameOut, Moniker
    from runtime.session.tool_runner import ToolRunner
    from tools.tool import Tool
    from tools.tool_registry import ToolRegistry

    class NoArgs(BaseModel):
        pass

    async def noop(args, ctx):
        return "ok"

    async def step(frame, ctx):
        if ctx.iteration == 0:
            return FrameOut(step="a", next_step="b", state={}, tool_calls=[{"name": "noop", "args": {}}])
        return FrameOut(step="b", next_step="b", state={}, text=str(frame.tool_results[0].status), done=True)

    async def scenario():
        persist = GatedToolRows()
        registry = ToolRegistry()
        registry.register(Tool("noop", "test", noop, NoArgs, timeout_s=5, idempotent=True))
        agent = SessionAgent(moniker=Moniker("tooled", step), persist=persist, tools=ToolRunner(registry, persist),
                             snapshot={"agent_id": "a", "session_id": "s", "status": "running", "iteration": -1,
                                       "config": {"interval_s": 0, "tools": ["noop"]},
                                       "created_at": datetime.now(timezone.utc)})
        agent.start()
        await until(lambda: persist.steps == [0, 1], timeout=90, what="the step after the tool step")
        await asyncio.sleep(0.2)  # give a wrongly early snapshot time to be written
        assert persist.tool_rows == {}  # that step did not wait for the ended row
        assert all(iteration < 1 for iteration, _ in persist.landed_at_snapshot), persist.landed_at_snapshot
        persist.gate.set()
        await asyncio.wait_for(agent.runner, 30)
        assert persist.snapshots[-1][:2] == (1, "done")
        after = [rows for iteration, rows in persist.landed_at_snapshot if iteration >= 1]
        assert after and all(list(rows.values()) == ["success"] for rows in after), persist.landed_at_snapshot

    asyncio.run(scenario())
