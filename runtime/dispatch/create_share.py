"""Which worker takes a new session: rendezvous hashing over the live workers.

Any worker may apply a ``create``, and the one that does owns the session
from then on.  Left to whoever polls first, one worker of several took nearly
every create (the first to wake after app.py's commit claims the whole batch),
so a machine's second worker process idled beside a busy first one.  Instead
each worker claims a create only when it is the session's *rendezvous* worker:
of the live worker ids (fresh heartbeats that say they poll the queue,
store/workers.py: a worker still adopting after a start takes none), the one with the
highest hash of (worker id, session id).  Every worker computes the same
answer from the same view without talking to the others, sessions spread
evenly, and a worker that joins or leaves moves only its own share.

Views differ for a moment (a heartbeat just went stale, a worker just
started), and a worker may be alive but not polling (adopting after a
restart, or stuck): so a create that has waited longer than ``grace_s`` is
anyone's, and no view can strand it.  Not much shorter than 10 s: a burst
of 1,000 creates takes a worker of a loaded 2-core machine several seconds to
claim and start, and at 3 s the other worker took 72 % of them
(bench/bench_processes.py).  Spreading is about load only; the
claim in the queue (store/actions.py) still decides who applies a create.
"""
from __future__ import annotations

import hashlib
import logging
import time
from datetime import datetime, timezone
from typing import Awaitable, Callable

log = logging.getLogger("runtime.create_share")


def weight(worker_id: str, session_id: str) -> int:
    """A stable pseudo-random weight of the pair (the same in every process: not ``hash()``)."""
    digest = hashlib.blake2b(f"{worker_id}\0{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous_worker(session_id: str, workers) -> str:
    """The worker, of ``workers``, that takes ``session_id``: highest weight wins (ties by id)."""
    return max(workers, key=lambda worker_id: (weight(worker_id, session_id), worker_id))


def waited_s(action: dict, now: datetime) -> float:
    """How long the action has been in the queue (since it was accepted); 0 when unknown.
    The queue's rows carry ``created_at`` as ISO text (store/codec.py)."""
    created = action.get("created_at")
    if isinstance(created, str):
        try:
            created = datetime.fromisoformat(created)
        except ValueError:
            return 0.0
    if not isinstance(created, datetime):
        return 0.0
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return (now - created).total_seconds()


class CreateShare:
    """This worker's share of the queued creates, from a view of the live
    workers refreshed at most every ``refresh_s``."""

    def __init__(self, worker_id: str, live_workers: Callable[[], Awaitable[set[str]]], *,
                 grace_s: float = 10.0, refresh_s: float = 1.0):
        self.worker_id = worker_id
        self.live_workers = live_workers  # the ids with a fresh heartbeat, polling
        self.grace_s = grace_s
        self.refresh_s = refresh_s
        self.workers: frozenset[str] = frozenset({worker_id})
        self._read_at = float("-inf")

    async def _view(self) -> frozenset[str]:
        if time.monotonic() - self._read_at >= self.refresh_s:
            try:
                workers = frozenset(await self.live_workers()) | {self.worker_id}
            except Exception:  # the store failing: keep the last view (the grace covers a stale one)
                log.exception("could not read the live workers; keeping %d", len(self.workers))
            else:
                if workers != self.workers:
                    log.info("creates shared between %d live workers: %s", len(workers), ",".join(sorted(workers)))
                self.workers = workers
            self._read_at = time.monotonic()
        return self.workers

    async def mine(self, creates: list[dict]) -> list[dict]:
        """The creates this worker claims: its rendezvous share, and any that waited past the grace."""
        workers = await self._view()
        if len(workers) == 1:
            return creates
        now = datetime.now(timezone.utc)
        return [a for a in creates if rendezvous_worker(a["session_id"], workers) == self.worker_id
                or waited_s(a, now) > self.grace_s]
