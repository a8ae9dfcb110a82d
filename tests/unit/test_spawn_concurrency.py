"""``spawn_agent`` serialises the spawns of one parent only (tools/spawn_agent.py).

Found by the kill loop (tests/kill_loop.py): after a restart, a dozen parents
resumed at once and each asked for two children; one lock for every session
made all their spawns wait in line, each for a few store reads and a commit,
and the later calls ran out of their 60 s timeout, so their children were
never created.  One parent's calls still wait for each other (they count each
other's children against ``max_children``)."""
import asyncio
import threading
from datetime import datetime, timezone

import pytest

from monikers import default_registry
from store import Store
from tools import spawn_agent
from tools.tool import ToolContext


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def parent(store: Store, session_id: str) -> None:
    now = datetime.now(timezone.utc)
    store.states.save({"session_id": session_id, "agent_id": f"a-{session_id}", "moniker": "scripted",
                       "status": "running", "iteration": 0, "config": {}, "created_at": now, "updated_at": now})


def test_a_slow_spawn_of_one_parent_does_not_hold_up_another_parents(store, monkeypatch):
    parent(store, "slow-parent")
    parent(store, "quick-parent")
    release = threading.Event()
    real_find = store.actions.find_create

    def find_create(*, session_id):
        if session_id == "call-of-slow":  # this spawn's store reads are slow (a loaded, fragmented store)
            release.wait(30)
        return real_find(session_id=session_id)

    monkeypatch.setattr(store.actions, "find_create", find_create)
    spawn = next(t for t in spawn_agent.build(store, default_registry()) if t.name == "spawn_agent")
    args = spawn.args_model.model_validate({"task": "help", "moniker": "joke"})

    async def main():
        slow = asyncio.ensure_future(spawn.run(args, ToolContext("call-of-slow", "a-slow-parent", "slow-parent", 0)))
        await asyncio.sleep(0.1)
        quick = await asyncio.wait_for(spawn.run(args, ToolContext("call-of-quick", "a-quick-parent",
                                                                   "quick-parent", 0)), timeout=10)
        release.set()
        return quick, await slow

    quick, slow = asyncio.run(main())
    assert quick["session_id"] == "call-of-quick" and slow["session_id"] == "call-of-slow"
    assert store.actions.find_create(session_id="call-of-quick") is not None
