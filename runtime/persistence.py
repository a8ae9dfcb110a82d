"""What the runtime needs from storage, as awaitables.

The store is synchronous (it is shared with the threaded Flask app); LanceDB's
calls release the GIL, so running them in worker threads keeps the event loop
free while a commit is in flight.  This class is the whole of the runtime's
dependency on ``store/``.

The queue calls (poll, claim, finish) run on a small executor of their own:
sharing asyncio's default pool with hundreds of step writes would make a
control action wait behind every agent's commit.
"""
import asyncio
from concurrent.futures import ThreadPoolExecutor
from functools import partial


class Persistence:
    def __init__(self, store):
        self.store = store
        self._queue_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="queue")

    async def _queue(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self._queue_pool, partial(fn, *args, **kwargs))

    # sessions
    async def save_snapshot(self, row: dict) -> None:
        # A future of the group commit, not a thread per waiting writer: a
        # thousand sessions can wait for one commit without a thousand threads.
        await asyncio.wrap_future(self.store.states.submit(row))

    async def load_snapshot(self, session_id: str) -> dict | None:
        return await asyncio.to_thread(self.store.states.get, session_id)

    async def resumable_snapshots(self) -> list[dict]:
        return await asyncio.to_thread(self.store.states.resumable)

    async def append_step(self, row: dict) -> dict:
        stored, committed = self.store.steps.submit(row)
        await asyncio.wrap_future(committed)
        return stored

    async def latest_step(self, session_id: str) -> dict | None:
        return await asyncio.to_thread(self.store.steps.latest, session_id=session_id)

    # actions
    async def pending_actions(self, limit: int) -> list[dict]:
        return await self._queue(self.store.actions.pending, limit)

    async def claim_actions(self, ids: list[str], worker_id: str, lease_s: float) -> list[str]:
        return await self._queue(self.store.actions.claim, ids, worker_id, lease_s)

    async def finish_action(self, action_id: str, ok: bool, error: str | None) -> None:
        await self._queue(self.store.actions.finish, action_id, ok=ok, error=error)

    async def release_expired_actions(self) -> int:
        return await self._queue(self.store.actions.release_expired)

    def queue_change_token(self):
        """Changes whenever any process commits to the queue; far cheaper than
        the pending query (~5-20 ms), so the poller can look often."""
        return self.store.actions.change_token()

    async def run_maintenance(self, maintainer) -> list[dict]:
        return await asyncio.to_thread(maintainer.run_due)

    async def release_processing_actions(self) -> int:
        return await self._queue(self.store.actions.release_all_processing)
