"""Run sessions of the baml moniker in process, on a fresh store, until each
reaches a given status."""
import asyncio

from ulid import ULID

from monikers import default_registry
from runtime.worker.service import AgentService
from store import Store

TERMINAL = ("done", "error", "stopped")


async def _drive(store, sessions, statuses, timeout_s, moniker="baml", tools=None, service_options=None):
    service = AgentService(store, default_registry(), tools=tools, watch_s=0.02, **(service_options or {}))
    stopping = asyncio.Event()
    runner = asyncio.create_task(service.run(stopping))
    ids = []
    for task, config in sessions:
        session_id = str(ULID())
        store.actions.enqueue("create", agent_id=str(ULID()), session_id=session_id,
                              payload={"moniker": moniker, "task": task, "config": {"interval_s": 0, **config}})
        ids.append(session_id)
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        while True:
            snaps = [await asyncio.to_thread(store.states.get, s) for s in ids]
            if all(s and s["status"] in statuses for s in snaps):
                return snaps
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"sessions not in {statuses}: {[s and s['status'] for s in snaps]}")
            await asyncio.sleep(0.05)
    finally:
        stopping.set()
        await runner


def run_sessions(tmp_path, *sessions, statuses=TERMINAL, timeout_s=30.0, moniker="baml", tools=None,
                 service_options=None):
    """Run ``(task, config)`` sessions of the baml moniker (or ``moniker``) until
    each has one of ``statuses`` (a terminal one by default); returns the store
    and their snapshots.  ``tools``: a tool registry (default: the built-in
    tools and installed plugins); ``service_options``: more keywords for the
    AgentService (``keep_model_io``...)."""
    store = Store(str(tmp_path / "db"))
    return store, asyncio.run(_drive(store, sessions, tuple(statuses), timeout_s, moniker, tools, service_options))
