"""What the runtime needs from storage, as awaitables.

The store is synchronous (it is shared with the threaded Flask app); LanceDB's
calls release the GIL, so running them in worker threads keeps the event loop
free while a commit is in flight.  This class is the whole of the runtime's
dependency on ``store/``.
"""
import asyncio


class Persistence:
    def __init__(self, store):
        self.store = store

    # sessions
    async def save_snapshot(self, row: dict) -> None:
        await asyncio.to_thread(self.store.states.save, row)

    async def load_snapshot(self, session_id: str) -> dict | None:
        return await asyncio.to_thread(self.store.states.get, session_id)

    async def resumable_snapshots(self) -> list[dict]:
        return await asyncio.to_thread(self.store.states.resumable)

    async def append_step(self, row: dict) -> dict:
        return await asyncio.to_thread(self.store.steps.append, row)

    async def latest_step(self, session_id: str) -> dict | None:
        return await asyncio.to_thread(self.store.steps.latest, session_id=session_id)

    # actions
    async def pending_actions(self, limit: int) -> list[dict]:
        return await asyncio.to_thread(self.store.actions.pending, limit)

    async def claim_actions(self, ids: list[str], worker_id: str, lease_s: float) -> list[str]:
        return await asyncio.to_thread(self.store.actions.claim, ids, worker_id, lease_s)

    async def finish_action(self, action_id: str, ok: bool, error: str | None) -> None:
        await asyncio.to_thread(self.store.actions.finish, action_id, ok=ok, error=error)

    async def release_expired_actions(self) -> int:
        return await asyncio.to_thread(self.store.actions.release_expired)

    async def release_processing_actions(self) -> int:
        return await asyncio.to_thread(self.store.actions.release_all_processing)
