"""The agent service: adopt sessions, dispatch actions, keep watch, shut down cleanly.

Several agents.py workers may share one database.  Each session is *owned* by
one worker (``agent_state.owner``), which alone runs it and applies its
actions.  Workers announce themselves with a heartbeat; a worker whose
heartbeat goes stale is dead, and then:
1. what it had claimed from the queue goes back to ``pending``;
2. its sessions (running, paused or stopping) are *adopted* by a live worker,
   a chunk at a time (one conditional update per chunk decides who gets
   which), reconciled with the steps persisted after their snapshots and
   resumed at next_step_token with iteration + 1 (paused ones stay paused;
   a step that was in flight is recorded as interrupted).
A restarted worker gets its old id back (see runtime/base/identity.py) and so
resumes its own sessions at once instead of waiting for its heartbeat to age.
A worker that was only slow, not dead, finds out before it writes again for
the sessions it lost, and drops them (runtime/base/fence.py): the heartbeat is a
lease, and adoption expects the snapshot it read to be unchanged.

Shutdown (SIGTERM) stops polling, lets in-flight actions finish, asks every
runner to stop at its next step boundary and waits up to ``stop_grace_s`` for
the steps in flight to be persisted, then cancels what is left *without*
touching the sessions' persisted status, so a restart resumes them.
"""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from ulid import ULID

from monikers.moniker_registry import MonikerRegistry, UnknownMoniker
from runtime.session import child_sessions
from runtime.dispatch.actions import ActionTable
from runtime.base.aio import every
from runtime.dispatch.create_share import CreateShare
from runtime.dispatch.dispatcher import Dispatcher
from runtime.base.fanout import Observers
from runtime.base.fence import Fence
from runtime.session.live_sessions import SessionRegistry
from runtime.worker.monitor import HealthMonitor
from runtime.worker.revival import Revivals
from runtime.base.persistence import Persistence
from runtime.record.model_io import ModelIOKeeper
from runtime.session.agent import SessionAgent, SessionFactory
from runtime.session.tool_runner import ToolRunner
from tools.tool_registry import ToolRegistry, default_tool_registry

if TYPE_CHECKING:
    from store import Store
    from store.maintenance import Maintainer

log = logging.getLogger("runtime.service")

ADOPT_CHUNK = 1000  # sessions taken with one conditional update and one read of their newer steps
IDLE_UPKEEP_S = 300.0  # idle saving: a maintenance round without writes of this process's, at least this often
FULL_ADOPTION_S = 300.0  # idle saving: a whole adoption round at least this often, whatever the workers show
# A leaving worker waits this long for its writes to land before it records itself
# stopped (Lance retries a conflicting commit for up to 30 s, then the writer once more).
DRAIN_WRITES_S = 40.0
IDLE_RETENTION_S = 60.0  # idle saving: the health monitor's retention query (30 days' horizon), this often


class AgentService:
    def __init__(self, store: Store, monikers: MonikerRegistry, *, tools: ToolRegistry | None = None,
                 worker_id: str | None = None,
                 destroy_grace_s: float = 5.0, maintainer: Maintainer | None = None, maintain_every_s: float = 2.0,
                 heartbeat_s: float | None = None, dead_after_s: float = 15.0, adopt_every_s: float = 5.0,
                 session_heartbeat_s: float = 5.0, monitor_options: dict | None = None, stop_grace_s: float = 10.0,
                 keep_model_io: int = 0, create_grace_s: float = 10.0, idle_saving: bool | None = None,
                 **dispatcher_options):
        self.persist = Persistence(store)
        if keep_model_io:
            self.persist.model_io = ModelIOKeeper(store, keep_model_io)
        self.monikers = monikers
        self.sessions = SessionRegistry()
        self.observers = Observers()
        self.worker_id = worker_id or f"worker-{str(ULID()).lower()}"
        self.maintainer = maintainer  # None: no upkeep
        self.maintain_every_s = maintain_every_s
        self._maintaining: asyncio.Future | None = None  # the maintenance round in flight, if any
        # Idle saving (by default where the store is on object storage, where every read
        # is billed): chores whose reads find nothing while nothing changes skip them
        # (the dispatcher's quiet queue, adoption rounds timed to when a peer could be
        # dead, maintenance rounds after this process's writes, retention every minute).
        self.idle_saving = store.on_object_storage if idle_saving is None else idle_saving
        # A heartbeat renews this worker's write lease (dead_after / 2, runtime/base/fence.py):
        # beat well within it, or the lease runs out between two beats.  On object
        # storage a beat is an upsert of 10 requests (3 PUTs, 6 LISTs, a GET;
        # bench_s3's chores part): by default every dead_after / 4 there (two
        # beats a lease), every 2 s on a local disk.
        if heartbeat_s is None:
            heartbeat_s = dead_after_s / 4 if store.on_object_storage else 2.0
        heartbeat_s = min(heartbeat_s, dead_after_s / 4)
        self.heartbeat_s, self.dead_after_s, self.adopt_every_s = heartbeat_s, dead_after_s, adopt_every_s
        self._adoption_due = 0.0  # monotonic time of the next adoption round that must run (idle saving)
        # (monotonic and wall time, alive workers) of the last whole round that found nothing to take
        self._quiet: tuple[float, datetime, set[str]] | None = None
        self._upkeep_mark: tuple[float, int] | None = None  # (when, this process's commits) at the last round
        self.tools = tools if tools is not None else default_tool_registry()
        self.tool_runner = ToolRunner(self.tools, self.persist, self.observers)
        self.factory = SessionFactory(self.persist, self.observers, self.tool_runner, owner=self.worker_id,
                                      heartbeat_s=session_heartbeat_s)
        self.fence = Fence(self.worker_id, self.persist, self.sessions, dead_after_s)
        self.persist.fence = self.fence
        self.revivals = Revivals(self.sessions, self.fence)
        # What each action type does: runtime/dispatch/actions.py
        self.actions = ActionTable(self.sessions, monikers, self.factory, store, destroy_grace_s=destroy_grace_s)
        self.dispatcher = Dispatcher(self.persist, self.actions.apply, worker_id=self.worker_id,
                                     observers=self.observers, owns=self._runs, fence=self.fence,
                                     took_effect=self.actions.took_effect,
                                     share=CreateShare(self.worker_id,
                                                       lambda: self.persist.alive_workers(dead_after_s, polling=True),
                                                       grace_s=create_grace_s),
                                     skip_quiet=self.idle_saving, **dispatcher_options)
        monitor_options = dict(monitor_options or {})
        if self.idle_saving:
            monitor_options.setdefault("retention_every_s", IDLE_RETENTION_S)
        self.monitor = HealthMonitor(self.sessions, self.persist, **monitor_options)
        self.stop_grace_s = stop_grace_s
        self.ready = False  # true while polling: sessions adopted, not stopping (runtime/worker/health.py)
        self._scanned = False  # the start's scan for unreported sub-agent outcomes (runtime/session/child_sessions.py)

    async def run(self, stopping: asyncio.Event) -> None:
        # Whatever this worker id still holds was claimed by its previous life
        # (the id is unique among live processes): hand it back before anything
        # else, so it applies in order with the actions accepted after it.
        if released := await self.persist.release_claims_of([self.worker_id]):
            log.warning("requeued %d actions this worker held when it last stopped", released)
        await self.fence.beat(lambda: self.persist.heartbeat(self.worker_id))
        # Beating before the first adoption: bringing back thousands of sessions
        # takes seconds, and this worker's lease must not run out meanwhile.  And
        # until it has left (shutdown): its last writes still count as its own.
        left = asyncio.Event()
        beating = asyncio.create_task(self._keep_alive(left), name="heartbeat")
        chores = []
        if self.maintainer:
            # Upkeep from the start, beside the adoption (in a thread).  Started
            # after it, a worker that crashed every few seconds never compacted:
            # fragments piled up, the adoption's reads slowed, and each start
            # took longer than the last (0.8 s to 46 s over ten restarts in the
            # kill loop, tests/kill_loop.py), so upkeep was reached less and less.
            chores.append(asyncio.create_task(self._maintain(stopping), name="maintenance"))
        try:
            await self.adopt()
            log.info("worker %s polling for actions", self.worker_id)
            self.ready = not stopping.is_set()
            try:  # say at once that it polls (app.py's GET /readyz), not at the next beat
                await self._beat()
            except Exception:  # the heartbeat chore beats again; polling need not wait for the store
                log.exception("heartbeat after adoption failed")
            chores += [asyncio.create_task(self._adopt_rounds(stopping), name="adoption"),
                       asyncio.create_task(self.monitor.run(stopping), name="monitor")]
            await self.dispatcher.run(stopping)
        finally:
            self.ready = False
            for task in chores:
                task.cancel()
            await asyncio.gather(*chores, return_exceptions=True)
            await self._finish_maintenance()
            await self.shutdown(beating=beating, left=left)

    # ---- ownership ------------------------------------------------------

    def _runs(self, session_id: str) -> SessionAgent | None:
        """The live session this worker runs, if any.  A finished one kept in
        memory is not claimed blindly: another worker may have woken it since
        (a sub-agent's result, a resume after error), so its actions go through
        the store's view of who runs it."""
        agent = self.sessions.get(session_id)
        # One whose runner crashed is taken back from its record at the next
        # adoption round: its actions wait for that (runtime/worker/revival.py).
        return agent if agent is not None and not agent.finished and not agent.crashed else None

    async def adopt(self) -> int:
        """Release dead workers' claims and take over sessions nobody alive runs,
        this worker's own whose runner crashed among them (runtime/worker/revival.py)."""
        await self.revivals.revive_crashed()
        self._adoption_due = time.monotonic() + self.adopt_every_s  # until this round says later
        self._quiet = None
        read_at = datetime.now(timezone.utc)
        beats = await self.persist.worker_beats()
        alive = self._alive(beats) | {self.worker_id}
        dead = await self.persist.claimants() - alive
        if dead and (released := await self.persist.release_claims_of(dead)):
            log.warning("requeued %d actions claimed by dead workers %s", released, sorted(dead))
        # Only orphans are read: sessions of other live workers stay in the store.
        # Nor the sessions this worker runs (only their ids are read).
        orphans = await self.persist.resumable_snapshots(skip_owners=alive - {self.worker_id},
                                                         skip_sessions=self.sessions.ids())
        candidates = [s for s in orphans if not self.sessions.get(s["session_id"])
                      and not (s.get("owner") in alive and s.get("owner") != self.worker_id)]
        if any(s.get("owner") not in (None, self.worker_id) for s in candidates):
            # A worker that heartbeat since it was read as dead was only slow:
            # leave its sessions (the conditional adoption below closes the rest).
            alive = await self.persist.alive_workers(self.dead_after_s)
            candidates = [s for s in candidates if s.get("owner") not in alive or s.get("owner") == self.worker_id]
        # In chunks, each taken with one conditional update and its newer steps
        # read in one query; its sessions resume (and step) while the next
        # chunk is taken.  Resuming together lets group commit put a chunk's
        # snapshot saves into a few commits.
        resuming = []
        for i in range(0, len(candidates), ADOPT_CHUNK):
            won, newer = await self._take_chunk(candidates[i:i + ADOPT_CHUNK])
            resuming += [asyncio.ensure_future(self._resume(s, newer[s["session_id"]])) for s in won]
        adopted = sum(await asyncio.gather(*resuming))
        if adopted:
            log.info("worker %s resumed %d sessions", self.worker_id, adopted)
        if not (dead or candidates):  # nothing to take: no round is needed before a live peer could be dead
            self._adoption_due = self._next_adoption(beats)
            self._quiet = (time.monotonic(), read_at, alive)
        if not self._scanned or dead or adopted:  # at start and at each takeover, not every round
            try:  # finished sub-agents whose outcome a crash left unreported, and parents left unwoken
                await child_sessions.report_unreported(self.persist, self.sessions.get)
                await child_sessions.wake_left_done(self.persist, self.sessions.get, alive - {self.worker_id})
                self._scanned = True
            except Exception:
                log.exception("the scan for unreported sub-agent outcomes failed; retried next round")
        return adopted

    async def _take_chunk(self, snapshots: list[dict]) -> tuple[list[dict], dict[str, list[dict]]]:
        """Of a chunk of orphans, the ones this worker now holds, and their steps
        past their snapshots.  The ones it held already (its previous life) need
        no update; the others it failed to take were won by another worker, or
        their owner turned out alive.  On a failure, none: the next round tries again."""
        mine = {s["session_id"] for s in snapshots if s.get("owner") == self.worker_id}
        try:
            mine |= await self.persist.adopt_sessions([s for s in snapshots if s["session_id"] not in mine],
                                                      self.worker_id)
            won = [s for s in snapshots if s["session_id"] in mine]
            for snapshot in won:
                self.fence.regained(snapshot["session_id"])
            return won, await self.persist.newer_steps({s["session_id"]: s["iteration"] for s in won})
        except Exception:
            log.exception("%d sessions could not be adopted; tried again next round", len(snapshots))
            return [], {}

    async def _resume(self, snapshot: dict, newer_steps: list[dict]) -> bool:
        """Run an adopted session again from its snapshot and the steps persisted after it."""
        try:
            return await self._resume_one(snapshot, newer_steps)
        except Exception:
            log.exception("session %s could not be adopted", snapshot["session_id"])
            return False

    def _runs_already(self, session_id: str) -> bool:
        """A session this worker's own create (or resume) registered while the
        adoption was reading: its runner is the one, and a second one would write
        every step twice (a replay created as an adoption round read the store
        ran twice, 6 step rows for 3).  Checked with no wait before the
        registration that follows it."""
        if self.sessions.get(session_id) is None:
            return False
        log.info("session %s is run here already (created meanwhile); not adopted", session_id)
        return True

    async def _resume_one(self, snapshot: dict, newer_steps: list[dict]) -> bool:
        session_id = snapshot["session_id"]
        if self._runs_already(session_id):
            return False
        snapshot, interrupted = SessionAgent.reconcile(snapshot, newer_steps)
        try:
            moniker = self.monikers.get(snapshot["moniker"])
        except UnknownMoniker:
            snapshot.update(status="error", status_reason="rehydrate", owner=self.worker_id,
                            last_error=f"moniker {snapshot['moniker']!r} is not installed")
            await self.persist.save_snapshot(snapshot)
            log.error("session %s: moniker %s not installed", session_id, snapshot["moniker"])
            return False
        if interrupted:
            await self.persist.append_step(interrupted)
            log.warning("session %s: step %d was interrupted by a dead worker; recorded", session_id,
                        interrupted["iteration"])
        destroyed = snapshot["status"] == "stopping"  # died while being destroyed: finish the destroy
        if destroyed:
            snapshot.update(status="stopped", status_reason="destroyed")
        agent = self.factory.make(snapshot, moniker)
        await self.factory.tools.settle_after_restart(agent, newer_steps)  # ended rows written behind a step
        if destroyed:
            await agent.end_open_calls()
        if self._runs_already(session_id):
            return False
        if agent.finished and not destroyed:
            # Its end came from a step row the crash left ahead of its snapshot: what its
            # runner would have done at that end comes now (a replay whose recording ran
            # on is woken, runtime/session/replay.py; it stayed done one step short).
            await agent.intercept.finished(agent)
        await agent.save()
        if self._runs_already(session_id):
            return False
        self.sessions.add(agent)
        if agent.finished:
            return False
        agent.start()
        log.info("session %s resumed status=%s next iteration %d agent=%s", session_id, agent.status,
                 agent.iteration + 1, agent.agent_id)
        return True

    # ---- chores ---------------------------------------------------------

    async def _keep_alive(self, stopping: asyncio.Event) -> None:
        """Heartbeat every ``heartbeat_s``, whatever else is under way (runtime/base/fence.py)."""
        await every(stopping, self.heartbeat_s, self._beat, "heartbeat")

    async def _beat(self) -> None:
        """One heartbeat: this worker is alive, and whether it polls the queue (``ready``)."""
        await self.fence.beat(lambda: self.persist.heartbeat(
            self.worker_id, maintenance=self.maintainer and self.maintainer.health(), polling=self.ready))

    async def _adopt_rounds(self, stopping: asyncio.Event) -> None:
        """Look for orphaned sessions every ``adopt_every_s`` (the first round ran at start).
        Apart from the heartbeat: a takeover of many sessions must not hold up the beats."""
        try:
            await asyncio.wait_for(stopping.wait(), timeout=self.adopt_every_s)
        except TimeoutError:
            await every(stopping, self.adopt_every_s, self._adoption_round, "adoption round")

    async def _adoption_round(self) -> None:
        """A round of ``adopt_every_s``'s tick.  With idle saving, after a whole round
        that found nothing to take: none until a live peer could be dead
        (``_next_adoption``), and then only a read of the workers (~5 requests on
        object storage, against ~18 for a whole round) unless one of them died or
        stopped since; a whole round at least every ``FULL_ADOPTION_S`` all the same."""
        if not self.idle_saving or self.sessions.crashed() or self._quiet is None:
            await self.adopt()
            return
        now = time.monotonic()
        if now < self._adoption_due:
            return
        if now - self._quiet[0] < FULL_ADOPTION_S:
            beats = await self.persist.worker_beats()
            if not self._died_since_quiet(beats):
                self._adoption_due = self._next_adoption(beats)
                return
        await self.adopt()

    def _alive(self, beats: dict) -> set[str]:
        """The workers ``beats`` (``worker_beats``) shows alive: running, beat within dead_after."""
        since = datetime.now(timezone.utc) - timedelta(seconds=self.dead_after_s)
        return {w for w, (status, beat) in beats.items() if status == "running" and beat is not None and beat >= since}

    def _died_since_quiet(self, beats: dict) -> bool:
        """Whether a worker is not alive now that was alive at the last quiet round,
        or that beat since shortly before it (a beat committed late, or a worker
        that started and died between two rounds): its sessions may be orphans."""
        _, read_at, was_alive = self._quiet
        alive, recent = self._alive(beats), read_at - timedelta(seconds=self.dead_after_s)
        return any(w != self.worker_id and w not in alive and (w in was_alive or (beat is not None and beat > recent))
                   for w, (_, beat) in beats.items())

    def _next_adoption(self, beats: dict) -> float:
        """Idle saving, after a round that found nothing to take: the next round is
        due when the first live peer would be dead if it beat no more (its last
        beat + dead_after), and at the latest dead_after from now (a peer that
        started since, or stopped).  A peer that dies is then taken over as soon
        as today's rounds would, without a round every ``adopt_every_s`` meanwhile
        (each reads the workers, the queue's claims and the sessions: 18 requests
        on object storage, bench_s3's chores part).  A crashed runner of this worker's still brings the
        next tick's round (``_adoption_round``)."""
        now = time.monotonic()
        if not self.idle_saving:
            return now + self.adopt_every_s
        wall = datetime.now(timezone.utc)
        wait = self.dead_after_s
        for worker_id in self._alive(beats) - {self.worker_id}:
            wait = min(wait, (beats[worker_id][1] - wall).total_seconds() + self.dead_after_s)
        return now + max(wait, self.adopt_every_s)

    async def _maintain(self, stopping: asyncio.Event) -> None:
        """Compact and clean up tables in a worker thread, off the event loop.
        A round is shielded: cancelling this chore (a shutdown) cannot stop its
        thread, so the service waits for the round instead of leaving it
        writing to a store that is being closed (``_finish_maintenance``)."""
        async def one_round():
            if not self._upkeep_wanted():
                return
            self._maintaining = asyncio.ensure_future(self.persist.run_maintenance(self.maintainer))
            await asyncio.shield(self._maintaining)

        await every(stopping, self.maintain_every_s, one_round, "maintenance round")

    def _upkeep_wanted(self) -> bool:
        """Whether a maintenance round runs now.  A round looks at every table's
        version (~20 requests on object storage).  With idle saving, only after
        this process committed to a table other than the workers' (its own
        heartbeats) since the last round, or ``IDLE_UPKEEP_S`` after it (the
        heartbeats' versions, other processes' commits: upkeep is due after
        100 versions, and the heartbeats make ~8 a minute: five minutes late is harmless)."""
        if not self.idle_saving:
            return True
        by_table = self.persist.store.writer.stats.by_table
        commits = sum(n for name, n in by_table.items() if name != "workers")
        now = time.monotonic()
        mark = self._upkeep_mark
        if mark is not None and commits == mark[1] and now - mark[0] < IDLE_UPKEEP_S:
            return False
        self._upkeep_mark = (now, commits)
        return True

    async def _finish_maintenance(self, timeout_s: float = 60.0) -> None:
        round_ = self._maintaining
        if round_ is not None and not round_.done():
            await asyncio.wait({round_}, timeout=timeout_s)

    async def shutdown(self, drain_s: float = 5.0, *, beating: asyncio.Task | None = None,
                       left: asyncio.Event | None = None) -> None:
        """Stop the runners (each at a step boundary, or cancelled after the
        grace), let every write land, stop ``beating`` (the heartbeat, kept
        until now: this worker's sessions are its own until it has left), and
        record the worker stopped."""
        await self.dispatcher.drain(drain_s)
        agents = self.sessions.running()
        runners = [a.runner for a in agents]
        for agent in agents:
            agent.request_stop(for_restart=True)  # in memory only: at the next step boundary, status untouched
        in_flight = [a.runner for a in agents if a.status != "paused" and not a.runner.done()]
        if in_flight:
            _, late = await asyncio.wait(in_flight, timeout=self.stop_grace_s)
            if late:
                log.warning("%d steps still running after %.0f s; cancelling them (they run again on restart)",
                            len(late), self.stop_grace_s)
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
        # Snapshots the runners left in flight: a clean stop leaves them current
        # (after a crash, reconcile repairs them from the steps instead).
        await asyncio.gather(*(a.flush_saves() for a in agents), return_exceptions=True)
        # Recorded stopped, its sessions are taken over at once: every write it
        # started lands first (a cancelled runner's step row may still be
        # committing).  Not drained in time, it is not recorded stopped: its
        # heartbeat ages out instead, after this process has exited.
        drained = await self.persist.drain_writes(DRAIN_WRITES_S)
        if left is not None:
            left.set()
        if beating is not None:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)
        if not drained:
            log.warning("worker %s: writes still committing after %.0f s; not recorded as stopped (its sessions "
                        "are taken over once its heartbeat is old)", self.worker_id, DRAIN_WRITES_S)
        else:
            try:
                await self.persist.heartbeat(self.worker_id, status="stopped")
            except Exception:
                log.exception("could not record this worker as stopped")
        log.info("worker %s stopped; %d runners cancelled, their sessions resume on restart",
                 self.worker_id, len(runners))
