"""What sessions, the dispatcher, the fence and the monitor need from storage,
as awaitables.

The store is synchronous (it is shared with the threaded Flask app); LanceDB's
calls release the GIL, so running them in worker threads keeps the event loop
free while a commit is in flight.  Every write of a session's own state (its
snapshot, its steps) goes through here, because here it is fenced: a worker
that lost a session to another cannot write it (runtime/base/fence.py).

Other parts of the runtime use ``store/`` directly, each for tables of its
own, off the step's path, whose rows need no fence (each follows from a write
the fence let through, such as a step's message posted after its step row,
or is upserted by id, so writing it again changes nothing):
runtime/record/archive.py (summaries), runtime/record/turn_tracker.py (turns),
runtime/record/conversation_log.py and runtime/dispatch/questions.py (conversation messages;
questions also reads tool calls and enqueues a question's timeout),
runtime/worker/metrics.py and runtime/worker/health.py (commit counters and workers'
heartbeats, read at scrape time), runtime/base/rate_limits.py (the shared rate
ledger) and semantic/embedder.py (vectors).  Routing them through this class
would add a hop per call and guard nothing.

The queue calls (poll, claim, finish) run on a small executor of their own:
sharing asyncio's default pool with hundreds of step writes would make a
control action wait behind every agent's commit.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING

from runtime.base.fence import Fence, SessionLost
from store.writer import Fenced

if TYPE_CHECKING:
    from store import Store
    from store.maintenance import Maintainer


class Persistence:
    def __init__(self, store: Store):
        self.store = store
        self._queue_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="queue")
        self.fence: Fence | None = None  # this worker's (set by the service); None: unfenced
        # what the model saw: a ModelIOKeeper (runtime/record/model_io.py; record-keeping sits above
        # the base, so it is handed in, not imported) when the worker keeps it, set by the service
        self.model_io = None

    async def _queue(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self._queue_pool, partial(fn, *args, **kwargs))

    # sessions
    async def save_snapshot(self, row: dict) -> None:
        """Save a snapshot if this worker still owns its session; else raise SessionLost."""
        fence, session_id = self.fence, row["session_id"]
        if fence is not None and not fence.allows(session_id, step=False):
            await fence.check(session_id, step=False)
        # A future of the group commit, not a thread per waiting writer: a
        # thousand sessions wait for one commit, woken by one call into the loop.
        refused = await self.store.states.submit(row, loop=asyncio.get_running_loop())
        if refused and fence is not None and row.get("owner") == fence.worker_id:
            # Some row of that commit was refused (owned by another worker): was it ours?
            held = await self.session_owners([session_id])
            if (held.get(session_id) or {}).get("owner") != fence.worker_id:
                fence.lose(session_id, "a snapshot save was refused: another worker owns it")
                raise SessionLost(session_id)
        if fence is not None and row.get("owner") == fence.worker_id:
            fence.regained(session_id)  # saved as its owner: it may step again here

    async def load_snapshot(self, session_id: str) -> dict | None:
        return await asyncio.to_thread(self.store.states.get, session_id)

    async def resumable_snapshots(self, skip_owners=(), skip_sessions=frozenset()) -> list[dict]:
        return await asyncio.to_thread(self.store.states.resumable, skip_owners, skip_sessions)

    async def append_step(self, row: dict) -> dict:
        """Append a step row if this worker still owns its session; else raise SessionLost.
        The lease is checked again in the committer, right before the commit:
        a row that waited past it is dropped and sent again once ownership is confirmed."""
        fence, loop = self.fence, asyncio.get_running_loop()
        if fence is None:
            stored, committed = self.store.steps.submit(row, loop=loop)
            await committed
            return stored
        while True:
            if not fence.allows(row["session_id"]):
                await fence.check(row["session_id"])
            stored, committed = self.store.steps.submit(row, guard=fence.valid, loop=loop)
            try:
                await committed
                return stored
            except Fenced:
                continue  # the lease ran out while the row waited: check ownership, then retry

    async def step_at(self, session_id: str, iteration: int) -> dict | None:
        """The step row of one iteration of a session (a fork's starting point)."""
        found = await asyncio.to_thread(self.store.steps.search, session_id=session_id, min_iteration=iteration,
                                        max_iteration=iteration, limit=1)
        return found[0] if found else None

    # tool calls
    async def save_tool_calls(self, rows: list[dict], new: bool = False) -> None:
        """Write whole rows (an upsert by id).  ``new``: the first write of each of
        these calls, appended (half an upsert's cost); fenced like a step row, so
        a worker that lost the session cannot add a second row for a call."""
        fence = self.fence
        if not new or fence is None:
            await asyncio.wrap_future(self.store.tool_calls.submit(rows, new=new))
            return
        while True:
            for session_id in {r["session_id"] for r in rows}:
                await fence.check(session_id)
            try:
                await asyncio.wrap_future(self.store.tool_calls.submit(rows, new=True, guard=fence.valid))
                return
            except Fenced:
                continue  # the lease ran out while the rows waited: check ownership, then retry

    async def tool_calls_of_step(self, session_id: str, iteration: int) -> list[dict]:
        return await asyncio.to_thread(self.store.tool_calls.of_step, session_id, iteration)

    async def tool_calls_of_steps(self, session_id: str, first: int, last: int) -> list[dict]:
        """The call rows of a session's steps ``first``..``last``, in step and call order."""
        return await asyncio.to_thread(self.store.tool_calls.of_steps, session_id, first, last)

    async def get_tool_call(self, tool_call_id: str) -> dict | None:
        return await asyncio.to_thread(self.store.tool_calls.get, tool_call_id)

    # actions
    async def pending_actions(self, limit: int) -> list[dict]:
        return await self._queue(self.store.actions.pending, limit)

    async def open_actions_of(self, session_ids) -> dict[str, dict[str, str]]:
        """session id -> {action id: status} of its actions pending or being applied (store/actions.py)."""
        return await self._queue(self.store.actions.open_in, session_ids)

    async def claim_actions(self, ids: list[str], worker_id: str, lease_s: float, starting=()) -> list[str]:
        """Claim ``ids``; those in ``starting`` start their handler at once, so
        their claim counts their attempt (store/actions.py)."""
        return await self._queue(self.store.actions.claim, ids, worker_id, lease_s, starting)

    async def start_attempt(self, action_id: str, worker_id: str, alone: bool = False) -> None:
        """Count an attempt of a claimed action, durably, before its handler starts."""
        await asyncio.wrap_future(self.store.actions.submit_start_attempt(action_id, worker_id, alone))

    async def attempt_failed(self, action_id: str, what: str) -> None:
        """Note on the action's attempt record what its handler raised."""
        await asyncio.wrap_future(self.store.actions.submit_attempt_failed(action_id, what))

    async def finish_action(self, action_id: str, ok: bool, error: str | None) -> None:
        await asyncio.wrap_future(self.store.actions.submit_finish(action_id, ok=ok, error=error))

    async def release_expired_actions(self) -> int:
        return await self._queue(self.store.actions.release_expired)

    def queue_change_token(self):
        """Changes whenever any process commits to the queue; far cheaper than
        the pending query (~5-20 ms), so the poller can look often."""
        return self.store.actions.change_token()

    def on_enqueue(self, callback):
        """``callback()`` (from any thread) after this process appends to the
        queue, until the function returned is called."""
        listeners = self.store.actions.appended
        listeners.append(callback)
        return lambda: listeners.remove(callback)

    def watch_queue(self):
        """A file descriptor that wakes on any commit to the queue, or None (then poll)."""
        return self.store.actions.watch()

    async def run_maintenance(self, maintainer: Maintainer) -> list[dict]:
        return await asyncio.to_thread(maintainer.run_due)

    async def release_action(self, action_id: str, worker_id: str) -> int:
        return await self._queue(self.store.actions.release, action_id, worker_id)

    async def release_claims_of(self, worker_ids) -> int:
        return await self._queue(self.store.actions.release_claims_of, worker_ids)

    async def open_actions(self) -> int:
        """Actions pending or claimed (store/actions.py ``open_count``)."""
        return await self._queue(self.store.actions.open_count)

    async def claimants(self) -> set[str]:
        return await self._queue(self.store.actions.claimants)

    async def find_create(self, session_id: str) -> dict | None:
        return await self._queue(self.store.actions.find_create, session_id=session_id)

    # workers and ownership
    async def drain_writes(self, timeout: float) -> bool:
        """Whether every write submitted so far has landed within ``timeout`` s
        (store/writer.py ``Writer.drain``)."""
        return await asyncio.to_thread(self.store.writer.drain, timeout)

    async def heartbeat(self, worker_id: str, status: str = "running", maintenance: dict | None = None,
                        polling: bool = False) -> None:
        await asyncio.wrap_future(self.store.workers.submit_beat(worker_id, status, maintenance, polling))

    async def alive_workers(self, dead_after_s: float, polling: bool = False) -> set[str]:
        return await self._queue(self.store.workers.alive, dead_after_s, polling)

    async def worker_beats(self) -> dict:
        """worker id -> (status, last heartbeat as a UTC datetime), every worker."""
        return await self._queue(self.store.workers.beats)

    async def session_owners(self, session_ids) -> dict[str, dict]:
        return await self._queue(self.store.states.get_many, session_ids)

    async def adopt_sessions(self, snapshots, new_owner: str) -> set[str]:
        """Of the snapshots read, the sessions ``new_owner`` now holds (one
        conditional update for all of them, store/state.py ``adopt_many``)."""
        return await asyncio.to_thread(self.store.states.adopt_many, snapshots, new_owner)

    async def newer_steps(self, iterations: dict[str, int]) -> dict[str, list[dict]]:
        """Each adopted session's steps past its snapshot's iteration, in one query."""
        return await asyncio.to_thread(self.store.steps.after_many, iterations)

    async def reassert_sessions(self, session_ids, owner: str) -> set[str]:
        return await asyncio.to_thread(self.store.states.reassert, session_ids, owner)

    async def get_action(self, action_id: str) -> dict | None:
        return await self._queue(self.store.actions.get, action_id)

    # sub-agents (runtime/session/child_sessions.py)
    async def enqueue(self, type_: str, *, agent_id: str, session_id: str, payload: dict) -> dict:
        """Append an action (durable when this returns)."""
        return await asyncio.to_thread(self.store.actions.enqueue, type_, agent_id=agent_id,
                                       session_id=session_id, payload=payload)

    async def cascaded(self, cause: str, type_: str, session_ids: list[str]) -> set[str]:
        """Which of these sessions have a ``type_`` action cascaded from the action ``cause``."""
        return await asyncio.to_thread(self.store.actions.cascaded, cause, type_, session_ids)

    async def children(self, session_id: str) -> list[dict]:
        return await asyncio.to_thread(self.store.states.children, session_id)

    async def tree(self, root_session_id: str) -> list[dict]:
        return await asyncio.to_thread(self.store.states.tree, root_session_id)

    async def unreported_outcomes(self) -> list[dict]:
        return await asyncio.to_thread(self.store.states.unreported_outcomes)

    async def done_with_child_results(self) -> list[dict]:
        return await asyncio.to_thread(self.store.states.done_with_child_results)

    # retention
    async def finished_sessions_before(self, when) -> list[dict]:
        return await asyncio.to_thread(self.store.states.finished_before, when)

    async def delete_sessions(self, session_ids: list[str], keep_summaries: bool = False) -> None:
        if not keep_summaries:
            await asyncio.to_thread(self.store.summaries.delete_sessions, session_ids)
        await asyncio.to_thread(self.store.steps.delete_sessions, session_ids)
        await asyncio.to_thread(self.store.tool_calls.delete_sessions, session_ids)
        await asyncio.to_thread(self.store.turns.delete_sessions, session_ids)
        await asyncio.to_thread(self.store.model_io.delete_sessions, session_ids)
        await asyncio.to_thread(self.store.states.delete_sessions, session_ids)
