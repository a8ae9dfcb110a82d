"""Every tool-call row ends, also for a session destroyed while the step that
asked for the calls ran (runtime/dispatch/handlers.py destroy, SessionAgent.end_open_calls).

Issue 37: a destroyed session's last step left calls with no row at all.  A
destroy asks the runner to stop; the runner persisted the step in flight
(with its calls) and returned at the stop, before its tool phase wrote a row.
Here the step is held until the destroy is under way."""
import asyncio

import pytest

from monikers import FrameOut, Moniker, default_registry
from monikers.frame import ToolCall
from store import Store
from tests.harness import finished, run_in_process, until

GATE: dict[str, asyncio.Event] = {}


async def held_step(frame, ctx):
    """Asks for three calls, once ``GATE["step"]`` is set."""
    await GATE["step"].wait()
    calls = [ToolCall(name="add", args={"numbers": [1, n]}) for n in range(2)]
    calls.append(ToolCall(name="human", args={"question": "sure?"}))
    return FrameOut(step=frame.step, next_step="next", state={}, text="calling", tool_calls=calls)


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "db"))
    yield s
    s.close()


def test_a_destroy_during_the_step_that_asked_for_calls_ends_every_call(store):
    monikers = default_registry()
    monikers.register(Moniker("held", held_step))
    store.actions.enqueue("create", agent_id="a", session_id="s",
                          payload={"moniker": "held", "config": {"interval_s": 0, "tools": ["add", "human"]}})

    async def scenario(service):
        GATE["step"] = asyncio.Event()
        await until(lambda: (s := store.states.get("s")) and s["status"] == "running", what="the session")
        destroy = store.actions.enqueue("destroy", agent_id="a", session_id="s")
        await until(lambda: store.states.get("s")["status"] == "stopping", what="the destroy under way")
        GATE["step"].set()  # the step lands now, its calls with it
        await until(lambda: finished(store, destroy["id"]), what="the destroy")

    run_in_process(store, scenario, monikers=monikers, watch_s=0.01)
    (step,) = store.steps.search(session_id="s")
    assert len(step["tool_calls"]) == 3
    rows = sorted(store.tool_calls.search(session_id="s", limit=10), key=lambda r: r["seq"])
    assert [r["call_id"] or r["id"] for r in rows] and len(rows) == 3, f"calls left without a row: {rows}"
    assert [(r["seq"], r["status"]) for r in rows] == [(0, "failed"), (1, "failed"), (2, "failed")]
    assert all(r["error"].startswith("cancelled: the session was destroyed") and r["finished_at"] for r in rows)
    assert store.states.get("s")["status"] == "stopped"
