"""runtime/tool_runner.py: which rows a tool step writes, and that a phase
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
from runtime.fanout import Observers
from runtime.persistence import Persistence
from runtime.tool_runner import ToolPhase, ToolRunner
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
        self.replay = None  # not a replay (runtime/replay.py)
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


def test_a_crash_before_an_idempotent_calls_first_row_runs_it_again(store):
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

