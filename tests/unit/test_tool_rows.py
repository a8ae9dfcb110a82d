"""runtime/session/tool_runner.py: which rows a tool step writes, and that a phase
rebuilt after a crash at any point of it runs every call as the contract says
(a call with no row or a pending row never ran; a running one is re-run when
idempotent, else ``unknown``), with one row per call and no duplicates.

The phase is driven directly on a real Store: a "crash" is the phase's task
cancelled as a shutdown does (it writes nothing more), then a new phase built
from the step row and whatever rows had landed (``load(fresh=False)``)."""
import asyncio

import pytest
from pydantic import BaseModel
from ulid import ULID

from domain.session_config import SessionConfig
from runtime.base.fanout import Observers
from runtime.base.persistence import Persistence
from runtime.session import intercept, tool_runner
from runtime.session.tool_runner import ToolPhase, ToolRunner
from store import Store
from tools.tool import Tool
from tools.tool_registry import ToolRegistry


class NoArgs(BaseModel):
    pass


class Heard:
    """An observer: every tool_call_updated, in order."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []

    async def tool_call_updated(self, row: dict) -> None:
        self.events.append((row["id"], row["status"]))


class Agent:
    """What a ToolPhase asks of its session, and nothing more."""

    def __init__(self, tools: list[str], concurrency: int = 4):
        self.agent_id, self.session_id = "agent-1", f"s-{ULID()}"
        self.config = SessionConfig.model_validate({"tools": tools, "tool_concurrency": concurrency})
        self.tool_slots = asyncio.Semaphore(concurrency)
        self.stop_requested, self.status = False, "running"
        self.intercept = intercept.chain(None)  # not a replay (runtime/session/intercept.py)
        self.reuses_tool_results = False
        self._stopped = asyncio.Event()

    async def reflect_waiting(self, reason):
        pass

    async def stopped(self):
        await self._stopped.wait()


class Tools:
    """Tools that count their runs, one of them blocking until released, each
    noting the status of its own row in the store when it starts."""

    def __init__(self, store: Store):
        self.store = store
        self.runs: dict[str, int] = {}
        self.seen_at_start: dict[str, str | None] = {}
        self.release = asyncio.Event()
        self.registry = ToolRegistry()
        for name, idempotent, blocks in [("quick", True, False), ("once", False, False),
                                         ("slow", True, True), ("slow_once", False, True)]:
            self.registry.register(Tool(name, "test", self._run(name, blocks), NoArgs, timeout_s=30,
                                        idempotent=idempotent))

    def _run(self, name: str, blocks: bool):
        async def run(args, ctx):
            self.runs[name] = self.runs.get(name, 0) + 1
            row = self.store.tool_calls.get(ctx.tool_call_id)
            self.seen_at_start[name] = row["status"] if row else None
            if blocks:
                await self.release.wait()
            return {"ran": name}
        return run


def step_with(store: Store, agent: Agent, names: list[str]) -> dict:
    """The step row of a step that asked for these calls, durable."""
    calls = [{"id": str(ULID()), "call_id": f"c{i}", "name": n, "args": {}} for i, n in enumerate(names)]
    stored, committed = store.steps.submit({"agent_id": agent.agent_id, "session_id": agent.session_id,
                                            "iteration": 1, "status": "ok", "tool_calls": calls, "state": {}})
    committed.result()
    return stored


@pytest.fixture
def store(tmp_path):
    store = Store(str(tmp_path / "db"))
    yield store
    store.close()


def rows_of(store: Store, agent: Agent) -> list[dict]:
    return store.tool_calls.search(session_id=agent.session_id, limit=100)


async def run_phase(runner: ToolRunner, agent: Agent, step: dict, fresh: bool):
    phase = ToolPhase(runner, agent, step)
    await phase.load(fresh=fresh)
    return await phase.run()


async def crash_when(runner, agent, step, fresh, landed):
    """Start a phase, 'crash' it (shutdown) once ``landed()`` holds."""
    task = asyncio.ensure_future(run_phase(runner, agent, step, fresh))
    for _ in range(2000):
        if landed():
            break
        await asyncio.sleep(0.005)
    else:
        raise AssertionError("the awaited rows never landed")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_a_quick_idempotent_call_writes_one_row_and_observers_hear_every_status(store):
    tools, heard = Tools(store), Heard()
    runner = ToolRunner(tools.registry, Persistence(store), Observers(heard))
    agent = Agent(["quick", "once"])
    step = step_with(store, agent, ["quick", "once"])
    results = asyncio.run(run_phase(runner, agent, step, fresh=True))
    assert [(r["name"], r["status"], r["result"]) for r in results] == [
        ("quick", "success", {"ran": "quick"}), ("once", "success", {"ran": "once"})]
    rows = {r["name"]: r for r in rows_of(store, agent)}
    assert len(rows_of(store, agent)) == 2 and rows["quick"]["status"] == rows["once"]["status"] == "success"
    assert tools.seen_at_start == {"quick": None, "once": "running"}  # only the non-idempotent waited for a row
    for row in rows.values():
        assert [s for i, s in heard.events if i == row["id"]] == ["pending", "running", "success"]
        assert row["created_at"] == step["created_at"]  # the step's time, which a re-plan gives it too


def test_a_crash_after_the_step_row_before_any_call_row_runs_every_call_once(store):
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["quick", "once"])
    step = step_with(store, agent, ["quick", "once"])  # ...and the worker died here
    assert rows_of(store, agent) == []
    results = asyncio.run(run_phase(runner, agent, step, fresh=False))
    assert [r["status"] for r in results] == ["success", "success"]
    assert tools.runs == {"quick": 1, "once": 1}
    assert sorted(r["name"] for r in rows_of(store, agent)) == ["once", "quick"]


def test_a_crash_while_tools_run_reruns_the_idempotent_and_reports_the_other_unknown(store):
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["slow", "slow_once"])
    step = step_with(store, agent, ["slow", "slow_once"])

    def both_running():  # the idempotent one's row is written for readers after RUNNING_ROW_AFTER_S
        return sorted(r["status"] for r in rows_of(store, agent)) == ["running", "running"]

    async def scenario():
        await crash_when(runner, agent, step, True, both_running)
        assert tools.runs == {"slow": 1, "slow_once": 1}
        tools.release.set()
        return await run_phase(runner, agent, step, fresh=False)

    results = asyncio.run(scenario())
    assert [(r["name"], r["status"]) for r in results] == [("slow", "success"), ("slow_once", "unknown")]
    assert tools.runs == {"slow": 2, "slow_once": 1}
    rows = {r["name"]: r for r in rows_of(store, agent)}
    assert len(rows_of(store, agent)) == 2  # re-running a call replaced its row, never added one
    assert rows["slow"]["attempts"] == 2 and rows["slow"]["status"] == "success"


def test_a_crash_before_an_idempotent_calls_first_row_runs_it_again(store, monkeypatch):
    # Its running row (for readers) would be written after RUNNING_ROW_AFTER_S: under
    # load the other call's rows took longer than that to land, and the crash came
    # after the row this case is about the absence of (a failure of a loaded run).
    monkeypatch.setattr(tool_runner, "RUNNING_ROW_AFTER_S", 600.0)
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["slow", "once"])
    step = step_with(store, agent, ["slow", "once"])

    async def scenario():
        # "once" has ended (its rows landed) while "slow" runs with no row yet: the crash comes now.
        await crash_when(runner, agent, step, True, lambda: tools.runs.get("slow") == 1 and any(
            r["name"] == "once" and r["status"] == "success" for r in rows_of(store, agent)))
        assert [r["name"] for r in rows_of(store, agent)] == ["once"]
        tools.release.set()
        return await run_phase(runner, agent, step, fresh=False)

    results = asyncio.run(scenario())
    assert [(r["name"], r["status"]) for r in results] == [("slow", "success"), ("once", "success")]
    assert tools.runs == {"slow": 2, "once": 1}
    assert len(rows_of(store, agent)) == 2


def test_a_call_waiting_for_a_tool_slot_has_its_pending_row_written(store):
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["slow", "quick"], concurrency=1)
    step = step_with(store, agent, ["slow", "quick"])

    async def scenario():
        task = asyncio.ensure_future(run_phase(runner, agent, step, fresh=True))
        for _ in range(2000):
            if any(r["name"] == "quick" and r["status"] == "pending" for r in rows_of(store, agent)):
                break
            await asyncio.sleep(0.005)
        else:
            raise AssertionError("the queued call's pending row never landed")
        tools.release.set()
        return await task

    assert [r["status"] for r in asyncio.run(scenario())] == ["success", "success"]
    assert sorted((r["name"], r["status"]) for r in rows_of(store, agent)) == [("quick", "success"),
                                                                               ("slow", "success")]



def test_a_childs_outcome_applied_as_a_recovered_spawn_starts_is_what_the_row_and_the_step_keep(store):
    """A ``spawn_agent {wait: true}`` call cut short by a crash is run again (it
    is idempotent: it finds its child and waits again, ``waiting_result``); the
    child had already finished, so its outcome is applied in the parent's lane
    right after the phase loads, before the phase's loop has started the call.
    The outcome's handler (runtime/dispatch/child_controls.py ``_end_wait_call``)
    waits for the call first: before, it ended the call ``success`` while the
    loop started it, the run's ``waiting_result`` landed over it, and the parent
    went on with the child's result while its row waited for good
    (test_processes' killed worker, a run beside the suite)."""
    from datetime import datetime, timezone

    from domain.statuses import TOOL_CALL_ENDED
    from runtime.dispatch.tool_controls import record_decision
    from tools.tool import Deferred

    runs = []

    async def spawn(args, ctx):
        runs.append(ctx.tool_call_id)
        return Deferred({"session_id": "kid", "status": "running"})

    registry = ToolRegistry()
    registry.register(Tool("spawnish", "test", spawn, NoArgs, timeout_s=30, idempotent=True))
    runner = ToolRunner(registry, Persistence(store))
    agent = Agent(["spawnish"])
    step = step_with(store, agent, ["spawnish"])  # ...and the worker died as the call ran
    outcome = {"status": "success", "error": None, "finished_at": datetime.now(timezone.utc),
               "result": {"session_id": "kid", "status": "done", "text": "42"}}

    async def child_outcome(phase, call_id):  # what _end_wait_call does with a live phase
        await phase.wait_for_call(call_id)
        row = phase.row(call_id)
        if row["status"] not in TOOL_CALL_ENDED:
            await record_decision(runner, agent, row, "child:kid:1", dict(outcome))

    async def scenario():
        phase = agent.tool_phase = ToolPhase(runner, agent, step, behind=True)
        await phase.load(fresh=False)
        call_id = step["tool_calls"][0]["id"]
        assert phase.row(call_id)["status"] == "pending"
        handler = asyncio.ensure_future(child_outcome(phase, call_id))
        await asyncio.sleep(0)  # the handler is applied first, as it was between the load and the loop
        results = await asyncio.wait_for(phase.run(), timeout=60)
        await asyncio.wait_for(handler, timeout=60)
        await phase.landed()
        # the worker lives on: whatever the phase left running ends too
        await asyncio.wait_for(asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()})), timeout=60)
        return results

    (result,) = asyncio.run(scenario())
    assert result["status"] == "success" and result["result"]["text"] == "42"
    rows = rows_of(store, agent)
    assert len(rows) == 1, rows  # (before: the run's row was added beside the outcome's)
    row = rows[0]
    assert (row["status"], row["decided_by"], row["result"]) == ("success", "child:kid:1", outcome["result"])
    assert len(runs) == 1


# ---- ended rows written behind the next step (ToolPhase behind=True) ----------

def next_step_of(store: Store, agent: Agent, results: list[dict]) -> dict:
    """The step after the tool step, as the session writes it: it records the results."""
    stored, committed = store.steps.submit({"agent_id": agent.agent_id, "session_id": agent.session_id,
                                            "iteration": 2, "status": "ok", "state": {},
                                            "inputs": {"tool_results": results, "inbox": []}})
    committed.result()
    return stored


def test_a_phase_behind_returns_the_results_and_its_rows_land_after(store):
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["quick", "once"])
    step = step_with(store, agent, ["quick", "once"])

    async def scenario():
        phase = ToolPhase(runner, agent, step, behind=True)
        await phase.load(fresh=True)
        results = await phase.run()
        await phase.landed()
        return results

    assert [r["status"] for r in asyncio.run(scenario())] == ["success", "success"]
    assert sorted((r["name"], r["status"]) for r in rows_of(store, agent)) == [("once", "success"),
                                                                               ("quick", "success")]


def test_a_crash_after_the_next_step_before_the_ended_rows_landed_is_settled_from_it(store):
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["slow", "slow_once", "quick"])
    step = step_with(store, agent, ["slow", "slow_once", "quick"])

    async def scenario():
        # Both slow calls have their running row; the quick one ended (its row landed): the crash comes
        # after the next step row, which recorded all three results, landed.
        await crash_when(runner, agent, step, True, lambda: sorted(r["status"] for r in rows_of(store, agent))
                         == ["running", "running", "success"])
        results = [{"id": "c0", "name": "slow", "status": "success", "result": {"ran": "slow"}},
                   {"id": "c1", "name": "slow_once", "status": "failed", "error": "boom"},
                   {"id": "c2", "name": "quick", "status": "success", "result": {"ran": "quick"}}]
        nxt = next_step_of(store, agent, results)
        written = await runner.settle_from_next(agent, step, nxt)
        again = await runner.settle_from_next(agent, step, nxt)  # a second restart changes nothing
        return written, again

    written, again = asyncio.run(scenario())
    assert sorted(r["name"] for r in written) == ["slow", "slow_once"] and again == []
    rows = {r["name"]: r for r in rows_of(store, agent)}
    assert len(rows_of(store, agent)) == 3
    assert rows["slow"]["status"] == "success" and rows["slow"]["result"] == {"ran": "slow"}
    assert rows["slow_once"]["status"] == "failed" and rows["slow_once"]["error"] == "boom"
    assert tools.runs == {"slow": 1, "slow_once": 1, "quick": 1}  # settling runs nothing


def test_settling_writes_the_rows_of_calls_that_never_had_one(store):
    runner = ToolRunner(Tools(store).registry, Persistence(store))
    agent = Agent(["quick"])
    step = step_with(store, agent, ["quick"])
    nxt = next_step_of(store, agent, [{"id": "c0", "name": "quick", "status": "success", "result": 7}])
    asyncio.run(runner.settle_from_next(agent, step, nxt))
    (row,) = rows_of(store, agent)
    assert (row["status"], row["result"], row["seq"], row["iteration"]) == ("success", 7, 0, 1)


def test_on_restart_only_a_newest_step_that_consumed_results_settles_the_step_before_it(store):
    runner = ToolRunner(Tools(store).registry, Persistence(store))
    agent = Agent(["quick"])
    step = step_with(store, agent, ["quick"])
    nxt = next_step_of(store, agent, [{"id": "c0", "name": "quick", "status": "success", "result": 3}])

    async def scenario():
        plain = dict(nxt, inputs=None)  # a newest step that consumed nothing: nothing to settle
        untouched = await runner.settle_after_restart(agent, [step, plain])
        # The snapshot was saved after the tool step: only the next step is newer, the tool step is read.
        written = await runner.settle_after_restart(agent, [nxt])
        return untouched, written

    untouched, written = asyncio.run(scenario())
    assert untouched == [] and [r["status"] for r in written] == ["success"]
    (row,) = rows_of(store, agent)
    assert (row["status"], row["result"], row["iteration"]) == ("success", 3, 1)


def test_ended_rows_that_failed_to_land_behind_are_written_again(store):
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["quick"])
    step = step_with(store, agent, ["quick"])
    real_write, failed = runner.write, []

    async def failing_once(rows, new=False):
        if not failed and any(r["status"] == "success" for r in rows):
            failed.append(rows)
            raise OSError("the store went away for a moment")
        await real_write(rows, new=new)

    runner.write = failing_once

    async def scenario():
        phase = ToolPhase(runner, agent, step, behind=True)
        await phase.load(fresh=True)
        results = await phase.run()
        assert rows_of(store, agent) == []  # the ended row's write failed behind the results
        await phase.landed()
        return results

    assert [r["status"] for r in asyncio.run(scenario())] == ["success"]
    assert failed and [r["status"] for r in rows_of(store, agent)] == ["success"]
    assert tools.runs == {"quick": 1}


# ---- recovery keeps each call's place -------------------------------------------

def test_calls_planned_again_after_a_crash_keep_their_seq(store):
    """Issue 37: recovery numbered the calls it planned again from 0, so a
    step's rows read seq 0, 0, 2 (and a replay of it diverged where nothing
    changed).  Calls 0 and 2 have rows (non-idempotent, running when the
    worker died); call 1 never got one."""
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["slow_once", "quick"])
    step = step_with(store, agent, ["slow_once", "quick", "slow_once"])
    planned = runner.plan(agent, step["iteration"], step["tool_calls"], step["created_at"])
    asyncio.run(runner.write([dict(planned[i], status="running") for i in (0, 2)], new=True))

    results = asyncio.run(run_phase(runner, agent, step, fresh=False))
    assert [r["status"] for r in results] == ["unknown", "success", "unknown"]
    rows = sorted(rows_of(store, agent), key=lambda r: r["seq"])
    assert [(r["seq"], r["call_id"]) for r in rows] == [(0, "c0"), (1, "c1"), (2, "c2")]


def test_an_approval_delivered_while_the_phase_saves_its_status_is_not_missed(store):
    """The phase's loop awaits the session's status save (``reflect_waiting``)
    between looking at its rows and waiting for a change.  An approval delivered
    during that await set the change signal, which the wait then cleared: the
    approved call stayed ``pending`` and nothing ran it (the long kill loop
    ended with sessions stuck so; whether this was their cause is not known)."""
    tools = Tools(store)
    runner = ToolRunner(tools.registry, Persistence(store))
    agent = Agent(["once"])
    agent.config = SessionConfig.model_validate({"tools": ["once"], "approve": ["once"], "tool_concurrency": 4})
    step = step_with(store, agent, ["once"])

    async def scenario():
        phase = ToolPhase(runner, agent, step)
        approved = []

        async def reflect_waiting(reason):  # the approval arrives while the status is being saved
            if reason == "approval" and not approved:
                row = next(iter(phase.rows.values()))
                approved.append(row["id"])
                phase.deliver(dict(row, status="pending", decided_by="approve-1"))
            await asyncio.sleep(0)
        agent.reflect_waiting = reflect_waiting
        await phase.load(fresh=True)
        return await asyncio.wait_for(phase.run(), timeout=30)

    results = asyncio.run(scenario())
    assert [(r["name"], r["status"]) for r in results] == [("once", "success")]
    assert tools.runs == {"once": 1}
