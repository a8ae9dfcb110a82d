"""Fencing: a worker that may have been taken for dead writes nothing more for
its sessions until it has made sure they are still its own.

Workers decide that another worker is dead from its heartbeat alone
(``heartbeat_at`` older than ``dead_after_s``), and then adopt its sessions.
A worker that was only slow (a stalled event loop, a long GC pause, storage
latency, SIGSTOP) does not know that happened; left alone it would go on
stepping sessions that are now someone else's: duplicate iterations, and its
snapshot saves writing its ownership back over the adopter's.

The guard is a *lease*: each heartbeat this worker commits, sent at monotonic
time ``t``, lets it write for its sessions until ``t + lease_s``, with
``lease_s = dead_after_s / 2``; nobody may take it for dead before
``t + dead_after_s``.  Checking the lease costs nothing (a clock read), so the
runner checks it before every step row and snapshot save.  Once it has run
out, the next write waits for one :meth:`Fence.revalidate` (shared by all the
writers waiting): a heartbeat, then one conditional update of this worker's
rows in agent_state (:meth:`store.state.StateTable.reassert`) that both makes
an adoption already under way fail and names the sessions still held.  The
others are *lost*: each is dropped at once (its runner stopped, nothing more
saved for it, one log line), and its pending writes raise
:class:`SessionLost`.

Two more guards stand behind the lease: snapshot saves are conditional on the
stored owner (store/writer.py ``UPSERT_CONDITIONS``), so a stale save never
writes ownership back, and a refused save marks its session lost; and
adoption re-reads who is alive and expects the snapshot it read unchanged
(runtime/worker/service.py).  A worker that leaves gracefully records itself
stopped (its sessions are then taken over at once) only after its writes have
landed (store/writer.py ``Writer.drain``).  What is left: a step row whose commit
is delayed by more than ``lease_s`` *after* its lease check (the process frozen
between the check and the commit, or Lance retrying a conflicting commit for
up to 30 s) can still land beside the adopter's row of the same iteration.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

log = logging.getLogger("runtime.fence")


def _log_failure(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("lease revalidation failed (tried again at the next heartbeat): %s", task.exception())


def _expected_loss(future: asyncio.Future) -> None:
    """Retrieve the outcome of a lost session's last save (SessionLost, most likely)."""
    if not future.cancelled():
        future.exception()


class SessionLost(Exception):
    """This worker no longer owns the session: another worker adopted it."""


# What the fence needs of the rest of the worker, declared here so that the
# fence (below every room) names nothing above it.  persistence.py, which
# calls the fence, and the session registry (runtime/session/live_sessions.py)
# are what the service passes in.

class Heartbeats(Protocol):
    async def heartbeat(self, worker_id: str) -> None: ...

    async def reassert_sessions(self, session_ids: list[str], worker_id: str) -> set[str]: ...


class Droppable(Protocol):
    agent_id: str

    def drop(self, expected_loss) -> None:
        """Stop at once and save nothing more; ``expected_loss`` is added to a
        save still in flight, whose SessionLost nobody else will read."""


class HeldSessions(Protocol):
    def unfinished_ids(self) -> list[str]: ...

    def remove(self, session_id: str) -> Droppable | None: ...


class Fence:
    def __init__(self, worker_id: str, persist: Heartbeats, sessions: HeldSessions, dead_after_s: float):
        self.worker_id = worker_id
        self.persist = persist
        self.sessions = sessions
        self.lease_s = dead_after_s / 2
        self.valid_until = float("-inf")  # monotonic
        self.lost: set[str] = set()
        self.revalidations = 0
        self._revalidating: asyncio.Future | None = None

    # ---- the lease --------------------------------------------------------

    def renewed(self, sent_at: float) -> None:
        """A heartbeat sent at monotonic ``sent_at`` was committed."""
        self.valid_until = max(self.valid_until, sent_at + self.lease_s)

    def valid(self) -> bool:
        return time.monotonic() < self.valid_until

    async def beat(self, heartbeat) -> None:
        """Run the heartbeat coroutine ``heartbeat()`` and renew the lease by it.
        A beat sent after the lease ran out renews nothing: it starts a
        revalidation in the background (this worker may have been adopted
        meanwhile), and the heartbeats go on while it runs."""
        sent_at = time.monotonic()
        lapsed = not self.valid() and self.valid_until != float("-inf")
        await heartbeat()
        if not lapsed:
            self.renewed(sent_at)
        elif self._revalidating is None:
            task = asyncio.ensure_future(self.revalidate())
            task.add_done_callback(_log_failure)

    # ---- checks before writing ---------------------------------------------

    def allows(self, session_id: str, step: bool = True) -> bool:
        """The check's answer when it needs no wait: the lease holds and the
        session is not lost (what nearly every write finds; no coroutine)."""
        return self.valid() and not (step and session_id in self.lost)

    async def check(self, session_id: str, step: bool = True) -> None:
        """Raise :class:`SessionLost` unless this worker may write for ``session_id`` now.
        A snapshot save (``step=False``) is left to the conditional upsert once the
        lease holds: it is how a lost session is legitimately taken again (a
        finished one woken here, runtime/session/child_sessions.py), and a save by the old,
        dropped session object is refused by that object itself (``agent.lost``)."""
        if not (step and session_id in self.lost) and not self.valid():
            await self.revalidate()
        if step and session_id in self.lost:
            raise SessionLost(session_id)

    async def revalidate(self) -> None:
        """Heartbeat, then keep what this worker still holds and drop the rest.
        Concurrent callers share one round."""
        if self._revalidating is None:
            self._revalidating = asyncio.ensure_future(self._revalidate())
        revalidating = self._revalidating
        try:
            await asyncio.shield(revalidating)
        finally:
            if revalidating.done() and self._revalidating is revalidating:
                self._revalidating = None

    async def _revalidate(self) -> None:
        sent_at = time.monotonic()
        await self.persist.heartbeat(self.worker_id)
        held = self.sessions.unfinished_ids()
        kept = await self.persist.reassert_sessions(held, self.worker_id)
        for session_id in set(held) - kept:
            self.lose(session_id, "adopted by another worker while this one was unresponsive")
        self.revalidations += 1
        self.renewed(sent_at)
        log.warning("worker %s lease had run out; %d sessions checked, %d still held, %d lost",
                    self.worker_id, len(held), len(kept), len(held) - len(kept))

    def regained(self, session_id: str) -> None:
        """This worker adopted ``session_id`` (again): it may write for it."""
        self.lost.discard(session_id)

    def lose(self, session_id: str, why: str) -> None:
        """Stop running ``session_id`` here, at once and without saving anything more."""
        if session_id in self.lost:
            return
        self.lost.add(session_id)
        agent = self.sessions.remove(session_id)
        if agent is not None:
            agent.drop(_expected_loss)
        log.warning("worker %s lost session %s agent=%s: %s", self.worker_id, session_id,
                    agent.agent_id if agent else None, why)
