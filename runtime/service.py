"""The agent service: recover, rehydrate, dispatch, and shut down cleanly.

Start-up reads like the crash story it has to survive:
1. actions left ``processing`` by a dead worker go back to ``pending``;
2. sessions whose snapshot says running, paused or stopping are rebuilt from
   their snapshot, reconciled with their newest step, and resumed at
   next_step_token with iteration + 1 (paused ones stay paused);
3. the dispatcher starts polling.
Shutdown stops polling, lets in-flight actions finish, then cancels the
runners *without* touching their persisted status, so a restart resumes them.
"""
import asyncio
import logging
import os
import socket

from ulid import ULID

from monikers.registry import MonikerRegistry, UnknownMoniker
from runtime.dispatcher import Dispatcher
from runtime.handlers import Handlers
from runtime.observers import Observers
from runtime.persistence import Persistence
from runtime.registry import SessionRegistry
from runtime.session import SessionAgent

log = logging.getLogger("runtime.service")


def new_worker_id() -> str:
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40] or "host"
    return f"{host}-{os.getpid()}-{str(ULID())[-6:]}"


class AgentService:
    def __init__(self, store, monikers: MonikerRegistry, *, worker_id: str | None = None,
                 destroy_grace_s: float = 5.0, maintainer=None, maintain_every_s: float = 2.0,
                 **dispatcher_options):
        self.persist = Persistence(store)
        self.maintainer = maintainer  # store.maintenance.Maintainer, or None for no upkeep
        self.maintain_every_s = maintain_every_s
        self.monikers = monikers
        self.sessions = SessionRegistry()
        self.observers = Observers()
        self.worker_id = worker_id or new_worker_id()
        self.handlers = Handlers(self.sessions, monikers, self.persist, observers=self.observers,
                                 destroy_grace_s=destroy_grace_s)
        self.dispatcher = Dispatcher(self.persist, self.handlers.handle, worker_id=self.worker_id,
                                     observers=self.observers, **dispatcher_options)

    async def run(self, stopping: asyncio.Event) -> None:
        released = await self.persist.release_processing_actions()
        if released:
            log.warning("requeued %d actions left processing by a previous run", released)
        await self.rehydrate()
        log.info("worker %s polling for actions", self.worker_id)
        upkeep = [asyncio.create_task(self._maintain(stopping), name="maintenance")] if self.maintainer else []
        try:
            await self.dispatcher.run(stopping)
        finally:
            for task in upkeep:
                task.cancel()
            await asyncio.gather(*upkeep, return_exceptions=True)
            await self.shutdown()

    async def _maintain(self, stopping: asyncio.Event) -> None:
        """Compact and clean up tables in a worker thread, off the event loop."""
        while not stopping.is_set():
            try:
                await self.persist.run_maintenance(self.maintainer)
            except Exception:
                log.exception("maintenance round failed")
            try:
                await asyncio.wait_for(stopping.wait(), timeout=self.maintain_every_s)
            except TimeoutError:
                pass

    async def rehydrate(self) -> int:
        count = 0
        for snapshot in await self.persist.resumable_snapshots():
            try:
                if await self._rehydrate_one(snapshot):
                    count += 1
            except Exception:
                log.exception("session %s could not be rehydrated", snapshot.get("session_id"))
        log.info("rehydrated %d sessions", count)
        return count

    async def _rehydrate_one(self, snapshot: dict) -> bool:
        session_id = snapshot["session_id"]
        snapshot = SessionAgent.reconcile(snapshot, await self.persist.latest_step(session_id))
        try:
            moniker = self.monikers.get(snapshot["moniker"])
        except UnknownMoniker:
            snapshot.update(status="error", status_reason="rehydrate",
                            last_error=f"moniker {snapshot['moniker']!r} is not installed")
            await self.persist.save_snapshot(snapshot)
            log.error("session %s: moniker %s not installed", session_id, snapshot["moniker"])
            return False
        if snapshot["status"] == "stopping":  # died while being destroyed: finish the destroy
            snapshot.update(status="stopped", status_reason="destroyed")
        agent = SessionAgent(snapshot=snapshot, moniker=moniker, persist=self.persist, observers=self.observers)
        await agent.save()
        self.sessions.add(agent)
        if agent.finished:
            return False
        agent.start()
        log.info("session %s rehydrated status=%s next iteration %d agent=%s", session_id, agent.status,
                 agent.iteration + 1, agent.agent_id)
        return True

    async def shutdown(self, drain_s: float = 5.0) -> None:
        await self.dispatcher.drain(drain_s)
        runners = [a.runner for a in self.sessions.running()]
        for runner in runners:
            runner.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
        log.info("worker %s stopped; %d runners cancelled, their sessions resume on restart",
                 self.worker_id, len(runners))
