"""Every tool-call row ends (runtime/session/agent.py ``tool_rows_landed``).

A tool step's ended rows are written behind the next step's row; nothing that
says the tool step is over (a snapshot) may be saved before they land, or a
crash leaves a row ``running`` that adoption has nothing to repair from.
Issue 37 saw it: ``tool_rows_landed`` let go of the landing phase *before*
awaiting it, so a snapshot save that came meanwhile (a handler's, or the
background save) did not wait, and saved the step after the tool step first.

Here the session runs in this process on a real store; the ended row's write
is held until the test lets it go, and every write is logged as it lands."""
import asyncio

import pytest
from pydantic import BaseModel

from monikers.scripted import SCRIPTED
from runtime.base.fanout import Observers
from runtime.base.persistence import Persistence
from runtime.session.agent import SessionAgent
from runtime.session.tool_runner import ToolPhase, ToolRunner
from store import Store
from tools.tool import Tool
from tools.tool_registry import ToolRegistry
from tests.harness import until


class NoArgs(BaseModel):
    pass


async def quick(args, ctx):
    return {"ok": True}


class HeldRows(Persistence):
    """Ended tool rows wait for ``release``; every write is logged once it landed."""

    def __init__(self, store: Store):
        super().__init__(store)
        self.release = asyncio.Event()
        self.held = asyncio.Event()
        self.log: list[tuple] = []

    async def save_tool_calls(self, rows, new=False):
        if any(r["status"] == "success" for r in rows):
            self.held.set()
            await self.release.wait()
        await super().save_tool_calls(rows, new=new)
        self.log += [("row", r["status"]) for r in rows]

    async def save_snapshot(self, row):
        await super().save_snapshot(row)
        self.log.append(("snapshot", row["iteration"]))


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def test_a_snapshot_saved_while_the_ended_rows_land_waits_for_them(store, monkeypatch):
    entered = []
    real_landed = ToolPhase.landed

    async def counted(self):
        entered.append(self.iteration)
        await real_landed(self)

    monkeypatch.setattr(ToolPhase, "landed", counted)

    async def main():
        persist = HeldRows(store)
        registry = ToolRegistry()
        registry.register(Tool("quick", "test", quick, NoArgs, timeout_s=5, idempotent=True))
        frames = [{"text": "call", "tool_calls": [{"name": "quick", "args": {}}]},
                  {"text": "after the call"}, {"text": "end", "done": True}]
        agent = SessionAgent(snapshot={"agent_id": "a", "session_id": "s", "status": "running", "iteration": -1,
                                       "config": {"interval_s": 0, "tools": ["quick"], "frames": frames}},
                             moniker=SCRIPTED, persist=persist, tools=ToolRunner(registry, persist, Observers()))
        agent.start()
        # Step 1 (which consumed the call's result) is durable and waits for the ended row.
        await until(lambda: store.steps.count("s") >= 2 and entered, what="step 1 waiting for the row to land")
        save = asyncio.ensure_future(agent.save())  # e.g. a handler queuing guidance
        # The save either went ahead (the bug) or waits for the rows too.
        await until(lambda: save.done() or len(entered) >= 2, what="the save to finish or wait")
        persist.release.set()
        await save
        await asyncio.wait_for(agent.runner, timeout=90)
        return persist.log

    log = asyncio.run(main())
    landed = log.index(("row", "success"))
    early = [entry for entry in log[:landed] if entry[0] == "snapshot" and entry[1] >= 1]
    assert not early, f"a snapshot past the tool step was saved before its ended row landed: {log}"
    (row,) = store.tool_calls.search(session_id="s", limit=10)
    assert row["status"] == "success" and row["finished_at"] is not None
