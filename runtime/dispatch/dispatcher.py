"""The poller: takes pending actions from the queue and applies them.

Ordering: actions are fetched most urgent first, then in the order they were
accepted.  Each session has a *lane*, a FIFO served by one task, so the actions
of one session apply strictly in order while different sessions proceed
concurrently.  An action is claimed (status ``processing``, with a lease) before
it enters a lane and is finished as ``done`` or ``failed`` when its handler
returns, whatever happens inside; it is never dispatched twice by this process.

Polling is driven by a change signal.  On a local database on Linux the
dispatcher sleeps on an inotify watch of the queue's manifests
(store/watch.py) and wakes as soon as any process commits to the queue; it
still looks at the change token every ``idle_watch_s`` in case a notification
was lost.  Elsewhere it reads the change token (a directory mtime, or the table
version on object storage) every ``watch_s``.  The pending query runs only when
something changed (some process appended, claimed or finished an action), right
after it found work, or every ``full_poll_s`` as a safety net.  With
``skip_quiet`` (object storage, where each query is ~5 billed requests) an
idle dispatcher counts the open actions once per queue version; while the
version is that of a count that found none, the full poll and the lease
release are skipped: nothing can be pending and no lease can run out until a
commit moves the version.  A control
action is picked up within tens of milliseconds, and an idle service sleeps.

With several workers on one database, each applies only the actions of the
sessions it owns (plus its share of the creates, and answers for finished or
unknown sessions).

Attempts.  Claiming is not trying (store/actions.py): an action's attempt is
counted, durably, when its handler starts, before it can have any effect; the
claim counts it for the first action of an idle lane, which starts at once,
and the lane counts it for the others when it reaches them.  A handler that
raises (anything but :class:`ActionError`, which is the action's own failure)
is tried again in its lane, after a pause, so the actions behind it keep their
order.  An action whose worker died during one of its attempts is tried again
*alone* (:class:`SoloGate`: no other handler runs beside it), because a dying
worker cuts every handler it runs and only a death during a lone attempt is
that action's doing.  An action with ``max_attempts`` attempts that ran alone
or raised, none of which ended, is *parked*: failed with the record of how each
attempt ended, unless the action table sees that it took effect after all
(``took_effect``), which ends it done.  A worker whose write lease ran out (runtime/base/fence.py)
may have been taken for dead and its claims handed to another worker: before
applying or finishing such an action it checks that the claim is still its own,
and leaves the action alone otherwise.

The dispatcher hands each action to ``handle`` (the action table's apply,
runtime/dispatch/actions.py); while it runs, :data:`BATCH_SESSIONS` holds which of its
batch's sessions the dispatcher found in the store.
"""
from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Awaitable, Callable

from domain.errors import ActionError
from domain.statuses import SESSION_FINISHED
from runtime.base.fanout import Observers
from runtime.base.fence import Fence, SessionLost
from runtime.base.persistence import Persistence
from runtime.dispatch.create_share import CreateShare
from store.actions import attempt_record, counts, cut_short, describe_attempts, started_text

if TYPE_CHECKING:
    from runtime.session.agent import SessionAgent

log = logging.getLogger("runtime.dispatcher")

MAX_QUEUE_RETRY_S = 5.0  # the longest pause of a lane whose action the queue could not record

# Set while an action's handler runs: the sessions of its poll batch found in
# the store (one query for the batch instead of one per create), or None when
# the batch had nothing to look up.
BATCH_SESSIONS: ContextVar[frozenset[str] | None] = ContextVar("batch_sessions", default=None)


@dataclass
class Claimed:
    """An action this worker claimed, waiting in its session's lane."""
    action: dict
    generation: int  # the fence's revalidation count when claimed, or when last found still ours
    known_sessions: frozenset[str] | None  # BATCH_SESSIONS while it is applied
    counted: bool = False  # its claim counted the attempt it starts with (the first of an idle lane)


class SoloGate:
    """Handlers run side by side, but one that must run *alone* waits until the
    others have ended, and none starts while it waits or runs.  Used for an
    action whose worker died during an earlier attempt (see the module
    docstring): whether it is what kills the worker is known only when it
    runs with nothing beside it."""

    def __init__(self):
        self._beside = 0  # handlers running side by side
        self._alone_wanted = 0  # handlers waiting to run alone
        self._alone = False
        self._changed = asyncio.Condition()

    @property
    def alone_running(self) -> bool:
        """A handler runs alone now."""
        return self._alone

    @asynccontextmanager
    async def beside(self):
        async with self._changed:
            await self._changed.wait_for(lambda: not self._alone and not self._alone_wanted)
            self._beside += 1
        try:
            yield
        finally:
            async with self._changed:
                self._beside -= 1
                self._changed.notify_all()

    @asynccontextmanager
    async def alone(self):
        async with self._changed:
            self._alone_wanted += 1
            try:
                await self._changed.wait_for(lambda: not self._alone and not self._beside)
            finally:
                self._alone_wanted -= 1
            self._alone = True
        try:
            yield
        finally:
            async with self._changed:
                self._alone = False
                self._changed.notify_all()


class Dispatcher:
    def __init__(self, persist: Persistence, handle: Callable[[dict], Awaitable[None]], *, worker_id: str,
                 observers: Observers | None = None,
                 owns: Callable[[str], SessionAgent | None] = lambda session_id: None,
                 watch_s: float = 0.02, idle_watch_s: float = 1.0, full_poll_s: float = 5.0, idle_poll_s: float = 1.0,
                 batch: int = 500, lease_s: float = 60.0, release_every_s: float = 5.0, max_attempts: int = 5,
                 retry_after_s: float = 0.2, fence: Fence | None = None,
                 took_effect: Callable[[dict], Awaitable[bool]] | None = None, share: CreateShare | None = None,
                 skip_quiet: bool = False):
        self.persist = persist
        self.share = share  # which creates are this worker's (runtime/dispatch/create_share.py); None: all
        self.fence = fence  # None: unfenced (a single worker in tests)
        self.handle = handle
        self.took_effect = took_effect  # whether an action about to be parked had taken effect (runtime/dispatch/actions.py)
        self.owns = owns  # session_id -> the live session if this worker runs it
        self.max_attempts = max_attempts
        self.retry_after_s = retry_after_s  # the pause before a raising handler's next attempt, doubled each time
        self.gate = SoloGate()
        self.observers = observers or Observers()
        self.worker_id = worker_id
        self.watch_s = watch_s
        self.idle_watch_s = idle_watch_s
        self._commit_seen = False  # set by the commit watch, consumed by the poll loop
        self.full_poll_s = full_poll_s
        self.idle_poll_s = max(idle_poll_s, watch_s)  # unwatched and idle: the longest wait between looks
        self.batch = batch
        self.lease_s = lease_s
        self.release_every_s = release_every_s
        # Object storage: while the queue's version is that of a look that found it
        # empty (nothing pending, nothing claimed), skip the full poll and the lease
        # release, each a query (~5 requests): nothing can be pending and no lease
        # can run out until some process commits to the queue, which changes the version.
        self.skip_quiet = skip_quiet
        self.in_flight: set[str] = set()
        self.lanes: dict[str, asyncio.Queue[Claimed]] = {}
        self.lane_tasks: dict[str, asyncio.Task] = {}
        self.applied = 0

    async def run(self, stopping: asyncio.Event) -> None:
        wake = asyncio.Event()
        watch = self.persist.watch_queue()
        if watch is not None:
            asyncio.get_running_loop().add_reader(watch.fileno(), self._notified, watch, wake)
        stopper = asyncio.create_task(stopping.wait())
        stopper.add_done_callback(lambda _: wake.set())
        loop = asyncio.get_running_loop()

        def enqueued():  # in the thread that committed
            try:
                loop.call_soon_threadsafe(self._enqueued, wake)
            except RuntimeError:  # this loop has closed
                pass
        stop_listening = self.persist.on_enqueue(enqueued)
        try:
            await self._poll_loop(stopping, wake, watched=watch is not None)
        finally:
            stop_listening()
            stopper.cancel()
            if watch is not None:
                asyncio.get_running_loop().remove_reader(watch.fileno())
                watch.close()

    def _enqueued(self, wake: asyncio.Event) -> None:
        self._commit_seen = True
        wake.set()

    def _notified(self, watch, wake: asyncio.Event) -> None:
        watch.drain()
        self._commit_seen = True
        wake.set()

    async def _poll_loop(self, stopping: asyncio.Event, wake: asyncio.Event, watched: bool) -> None:
        seen_version, last_full, last_release, found = None, 0.0, 0.0, 0
        quiet_version = checked_version = None  # the queue's version when last found empty / last counted
        idle_wait = self.watch_s
        while not stopping.is_set():
            wake.clear()  # before looking: a commit from now on wakes the wait below
            now = time.monotonic()
            changed = False
            try:
                version = self.persist.queue_change_token()
                notified, self._commit_seen = self._commit_seen, False
                changed = notified or version != seen_version
                quiet = quiet_version is not None and version == quiet_version and not notified \
                    and not self.in_flight
                if not quiet and now - last_release > self.release_every_s:
                    last_release = now
                    released = await self.persist.release_expired_actions()
                    if released:
                        log.warning("released %d actions whose lease expired", released)
                if found or changed or (not quiet and now - last_full > self.full_poll_s):
                    seen_version, last_full = version, now  # read before querying: no change slips by
                    found = await self.poll_once()
                if self.skip_quiet and not found and not quiet and idle_wait >= self.idle_poll_s \
                        and version != checked_version:  # open actions close only by a commit: count once a version
                    checked_version = version
                    quiet_version = await self._quiet_at(version)
            except Exception:
                log.exception("poll failed; retrying")
                found = 0
            # Busy, or nothing to wake us: look again soon.  Watched and idle: sleep.
            # Unwatched (object storage, where each look is a request) and idle: look
            # less and less often, up to idle_poll_s; a change or this process's own
            # enqueue brings it back to watch_s at once.
            idle_wait = self.watch_s if found or changed else min(idle_wait * 2, self.idle_poll_s)
            timeout = self.idle_watch_s if watched and not found else idle_wait
            try:
                await asyncio.wait_for(wake.wait(), timeout=timeout)
            except TimeoutError:
                pass

    async def _quiet_at(self, version):
        """``version`` if the queue held no open action at it (or later), else None.
        The version was read before the count: a commit in between only makes
        the next look see a change."""
        if self.in_flight or await self.persist.open_actions():
            return None
        log.debug("queue quiet at version %s: full poll and lease release wait for a change", version)
        return version

    async def poll_once(self) -> int:
        """Fetch, claim and route one batch; returns how many actions were dispatched."""
        if self.fence is not None and not self.fence.valid():
            await self.fence.revalidate()  # maybe taken for dead: claim nothing before knowing
        pending = await self.persist.pending_actions(self.batch)
        fresh, known = await self._claimable([a for a in pending if a["id"] not in self.in_flight])
        if not fresh:
            return 0
        generation = self.fence.revalidations if self.fence else 0
        starting = self._lane_heads(fresh)
        held = set(await self.persist.claim_actions([a["id"] for a in fresh], self.worker_id, self.lease_s,
                                                    starting))
        for action in fresh:  # already in priority, then acceptance order
            if action["id"] not in held:
                continue
            self.in_flight.add(action["id"])
            self._route(Claimed(action, generation, known, counted=action["id"] in starting))
        return len(held)

    def _lane_heads(self, actions: list[dict]) -> set[str]:
        """The actions whose handler starts as soon as they are claimed: the
        first of each lane not running now, unless an earlier attempt of it was
        cut short (it runs alone, and its start says so) or it is to be parked.
        Their claim counts their attempt (store/actions.py)."""
        busy, heads = set(self.lanes), set()
        for action in actions:
            key = _lane_key(action)
            if key not in busy:
                busy.add(key)
                if not attempt_record(action.get("error")):
                    heads.add(action["id"])
        return heads

    async def _claimable(self, actions: list[dict]) -> tuple[list[dict], frozenset[str] | None]:
        """The actions this worker may apply: creates, those of its own sessions,
        and those of sessions no live worker runs (finished or unknown ones, to
        be answered).  A live session of another worker is left to its owner; a
        session whose create is still queued waits for it.  Also returns the
        sessions of the batch found in the store (None when none was looked up).
        With several workers, a create is claimed by its session's rendezvous
        worker, or by anyone once it has waited (runtime/dispatch/create_share.py)."""
        actions = await self._my_creates(actions)
        mine, others, creates = [], [], []
        for action in actions:
            session_id = action.get("session_id")
            if action.get("type") == "create" and session_id:
                creates.append(action)
            (mine if action.get("type") == "create" or not session_id or self.owns(session_id) else others).append(action)
        if not (others or creates):
            return mine, None
        # One query for the whole batch, creates included: each create is told
        # whether its session exists instead of looking it up on its own.
        known = await self.persist.session_owners([a["session_id"] for a in others + creates])
        held_back: set[str] = set()
        for action in others:
            snapshot = known.get(action["session_id"])
            if action["session_id"] in held_back:
                continue  # an earlier action of its session waits: so does this one, to keep their order
            if snapshot is None:
                create = await self.persist.find_create(action["session_id"])
                if create and create["status"] in ("pending", "processing"):
                    # The create may finish while later actions are looked at (each
                    # look awaits): hold the session's later actions back with this one.
                    held_back.add(action["session_id"])
                    continue
                mine.append(action)
            elif snapshot["status"] in SESSION_FINISHED:
                mine.append(action)
        mine = await self._behind_claims_elsewhere(mine, {a["id"] for a in others})
        order = {a["id"]: i for i, a in enumerate(actions)}
        return sorted(mine, key=lambda a: order[a["id"]]), frozenset(known)

    async def _behind_claims_elsewhere(self, mine: list[dict], answered: set[str]) -> list[dict]:
        """``mine`` without the actions of finished or unknown sessions (``answered``:
        anyone's to apply) that must wait so that a session's actions are still
        applied in the order they were accepted: those of a session with an action
        claimed by another worker, or by this worker's previous life, not yet
        finished (two workers of ``--processes 2``: a pause answered by one while the
        destroy accepted before it was still claimed by the other, killed, and
        finished later), and those with an earlier action of their session pending
        but not in ``mine`` (the killed worker's restart handed the destroy back to
        the queue between this poll's read of the pending actions and this look, so
        the destroy was in neither: the pause was answered first)."""
        waiting = {a["session_id"] for a in mine if a["id"] in answered}
        if not waiting:
            return mine
        open_actions = await self.persist.open_actions_of(waiting)
        routed = {a["id"] for a in mine}
        kept = []
        for action in mine:
            others = open_actions.get(action.get("session_id"), {})
            claimed_elsewhere = any(status == "processing" and action_id not in self.in_flight
                                    for action_id, status in others.items())
            earlier_unseen = any(status == "pending" and action_id < action["id"] and action_id not in routed
                                 for action_id, status in others.items())
            if action["id"] in answered and (claimed_elsewhere or earlier_unseen):
                continue
            kept.append(action)
        return kept

    async def _my_creates(self, actions: list[dict]) -> list[dict]:
        """``actions`` without the creates another worker is to take."""
        creates = [a for a in actions if a.get("type") == "create" and a.get("session_id")]
        if self.share is None or not creates:
            return actions
        kept = {a["id"] for a in await self.share.mine(creates)}
        return [a for a in actions if a["id"] in kept or not (a.get("type") == "create" and a.get("session_id"))]

    def _route(self, claimed: Claimed) -> None:
        key = _lane_key(claimed.action)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = asyncio.Queue()
            self.lane_tasks[key] = asyncio.create_task(self._serve_lane(key, lane), name=f"lane:{key}")
        lane.put_nowait(claimed)

    async def _serve_lane(self, key: str, lane: asyncio.Queue[Claimed]) -> None:
        try:
            while not lane.empty():
                await self._apply(lane.get_nowait())
        finally:
            # No await between the emptiness check and removal: a new action
            # routed after this point creates a fresh lane.
            self.lanes.pop(key, None)
            self.lane_tasks.pop(key, None)

    async def _apply(self, claimed: Claimed) -> None:
        action = claimed.action
        action_id = action["id"]
        started = time.perf_counter()
        pause = self.retry_after_s
        while True:
            try:
                if not await self._still_claimed(claimed):
                    self.in_flight.discard(action_id)
                    return
                ok, error = await self._attempts(claimed)
                break
            except SessionLost:  # adopted by another worker meanwhile, or its runner crashed
                await self._release(claimed)
                self.in_flight.discard(action_id)
                return
            except asyncio.CancelledError:
                raise  # shutting down: the lease will hand the action back
            except Exception:
                # The queue could not record an attempt (the store is failing): untried, it
                # must not fail, and the session's later actions must not overtake it (left to
                # its lease, it was applied after a pause accepted later), so its lane waits
                # and tries again.  Another worker that took it meanwhile wins (_still_claimed).
                log.exception("action %s (%s) could not be attempted (the queue did not record it); its lane "
                              "tries again in %.1f s agent=%s session=%s", action_id, action.get("type"), pause,
                              action.get("agent_id"), action.get("session_id"))
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_QUEUE_RETRY_S)
        try:
            if not await self._finish(claimed, ok, error):
                return
            self.applied += 1
            await self.observers.notify("action_finished", action, ok, error)
            log.info("action %s %s %s in %.1f ms agent=%s session=%s", action_id, action.get("type"),
                     "done" if ok else "failed", (time.perf_counter() - started) * 1000,
                     action.get("agent_id"), action.get("session_id"))
        except Exception:
            log.exception("action %s could not be marked finished; its lease will expire", action_id)
        finally:
            self.in_flight.discard(action_id)

    async def _release(self, claimed: Claimed) -> None:
        """Hand an action whose session this worker no longer runs back to the
        queue at once, for whoever runs the session next (another worker, or this
        one once it has taken back a session whose runner crashed:
        runtime/worker/revival.py).  Left to its lease instead, the session's later
        actions were claimed and applied before it.  If the queue cannot record
        the release (the store failing), the lease hands it back."""
        action = claimed.action
        try:
            await self.persist.release_action(action["id"], self.worker_id)
            log.warning("action %s (%s) handed back to the queue for whoever runs session %s now",
                        action["id"], action.get("type"), action.get("session_id"))
        except Exception:
            log.exception("action %s could not be handed back; its lease will", action["id"])

    async def _finish(self, claimed: Claimed, ok: bool, error: str | None) -> bool:
        """Mark the action finished; False when another worker holds it now.  While
        the queue cannot record it (the store failing), the lane waits and tries
        again: left to its lease, the action was applied a second time after the
        session's later actions (a pause re-applied after the resume that followed it)."""
        pause = self.retry_after_s
        while True:
            try:
                if not await self._still_claimed(claimed):
                    return False
                await self.persist.finish_action(claimed.action["id"], ok, error)
                return True
            except (SessionLost, asyncio.CancelledError):
                raise
            except Exception:
                log.exception("action %s could not be marked finished; its lane tries again in %.1f s",
                              claimed.action["id"], pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_QUEUE_RETRY_S)

    async def _attempts(self, claimed: Claimed) -> tuple[bool, str | None]:
        """Try the action's handler until it returns, fails for its own reason
        (ActionError), or ``max_attempts`` of its attempts (those of its earlier
        claims too: their record is on the row) ran alone or raised without
        ending.  Each attempt is counted durably before its handler starts.
        Returns (ok, error)."""
        action = claimed.action
        action_id = action["id"]
        tried = attempt_record(action.get("error"))
        while True:
            if sum(map(counts, tried)) >= self.max_attempts:
                return await self._park(action, tried)
            alone = cut_short(tried)  # its worker died during an attempt: try it with nothing beside it
            async with self.gate.alone() if alone else self.gate.beside():
                if not claimed.counted:
                    await self.persist.start_attempt(action_id, self.worker_id, alone)
                claimed.counted = False
                tried.append(f"{started_text(self.worker_id, alone)}{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%S.%f}")
                try:
                    await self._handle(claimed)
                    return True, None
                except ActionError as exc:
                    log.warning("action %s (%s) failed agent=%s session=%s: %s", action_id, action.get("type"),
                                action.get("agent_id"), action.get("session_id"), exc)
                    return False, str(exc)
                except (SessionLost, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    what = f"{type(exc).__name__}: {exc}"
                    log.exception("action %s (%s) raised on attempt %d agent=%s session=%s", action_id,
                                  action.get("type"), len(tried), action.get("agent_id"), action.get("session_id"))
            await self.persist.attempt_failed(action_id, what)
            tried[-1] += f", raised {what}"
            if sum(map(counts, tried)) < self.max_attempts:
                await asyncio.sleep(self.retry_after_s * 2 ** (len(tried) - 1))

    async def _park(self, action: dict, tried: list[str]) -> tuple[bool, str | None]:
        """An action tried ``max_attempts`` times, none of which ended: failed,
        saying how each attempt went, unless it took effect after all."""
        try:
            applied = self.took_effect is not None and await self.took_effect(action)
        except Exception:
            log.exception("action %s: could not tell whether it took effect", action["id"])
            applied = False
        if applied:
            log.warning("action %s (%s) took effect in an attempt that did not end; done session=%s",
                        action["id"], action.get("type"), action.get("session_id"))
            return True, None
        error = describe_attempts(tried)
        log.error("action %s (%s) %s agent=%s session=%s", action["id"], action.get("type"), error,
                  action.get("agent_id"), action.get("session_id"))
        return False, error

    async def _handle(self, claimed: Claimed) -> None:
        await self.observers.notify("action_started", claimed.action)
        token = BATCH_SESSIONS.set(claimed.known_sessions)
        try:
            await self.handle(claimed.action)
        finally:
            BATCH_SESSIONS.reset(token)

    async def _still_claimed(self, claimed: Claimed) -> bool:
        """False when this worker's claim on the action may have been released:
        its lease ran out since the claim and the queue says another worker (or
        nobody) holds it now.  Free while the lease holds (a clock read)."""
        if self.fence is None:
            return True
        if not self.fence.valid():
            await self.fence.revalidate()
        if self.fence.revalidations == claimed.generation:
            return True
        action = claimed.action
        row = await self.persist.get_action(action["id"])
        if row and row["status"] == "processing" and row["claimed_by"] == self.worker_id:
            claimed.generation = self.fence.revalidations
            return True
        log.warning("action %s (%s) is no longer claimed by %s (now %s by %s); leaving it", action["id"],
                    action.get("type"), self.worker_id, row and row["status"], row and row["claimed_by"])
        return False

    async def drain(self, timeout: float) -> None:
        """Let the actions already dispatched finish, up to ``timeout``."""
        tasks = list(self.lane_tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)


def _lane_key(action: dict) -> str:
    """The lane an action waits in: its session's (else its agent's, else its own)."""
    return action.get("session_id") or action.get("agent_id") or action["id"]
