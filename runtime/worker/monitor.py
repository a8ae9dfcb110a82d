"""The health monitor of agents.py: looks after sessions nobody is watching.

Every ``every_s`` it
- fails sessions whose step has run past its timeout plus a grace period (a
  moniker that ignores cancellation), with reason ``stuck``;
- stops sessions paused for longer than their ``pause_expiry_s`` (or the
  service default), with reason ``pause_expired``;
- removes finished sessions (done, stopped, error) whose status changed more
  than ``retention_s`` ago: their snapshot and their steps.
Actions that keep failing are parked by the dispatcher (``max_attempts``).
"""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from runtime.base.aio import every

if TYPE_CHECKING:
    from runtime.record.archive import Archiver
    from runtime.session.live_sessions import SessionRegistry
    from runtime.base.persistence import Persistence
    from runtime.session.agent import SessionAgent

log = logging.getLogger("runtime.monitor")

DAY = 86_400.0


class HealthMonitor:
    def __init__(self, sessions: SessionRegistry, persist: Persistence, *, every_s: float = 5.0,
                 stuck_grace_s: float = 30.0,
                 pause_expiry_s: float = 7 * DAY, retention_s: float = 30 * DAY, stop_grace_s: float = 5.0,
                 keep_summaries: bool = False, archiver: Archiver | None = None, retention_every_s: float = 0.0):
        self.sessions = sessions
        self.persist = persist
        self.every_s = every_s
        self.stuck_grace_s = stuck_grace_s
        self.pause_expiry_s = pause_expiry_s
        self.retention_s = retention_s
        self.stop_grace_s = stop_grace_s
        self.keep_summaries = keep_summaries
        self.archiver = archiver  # runtime/record/archive.py, passed in by agents.py
        # The retention query (the only read of a check) at most this often; 0: every
        # check.  Its horizon is days: on object storage a minute apart saves requests.
        self.retention_every_s = retention_every_s
        self._retention_at: float | None = None

    async def run(self, stopping: asyncio.Event) -> None:
        await every(stopping, self.every_s, self.check, "health check")

    async def check(self) -> None:
        now = datetime.now(timezone.utc)
        for agent in list(self.sessions.sessions.values()):
            if agent.finished:
                continue
            if agent.step_started_at and self._stuck(agent, now):
                await self._fail_stuck(agent, now)
            elif agent.status == "paused" and self._expired(agent, now):
                await self._expire(agent)
        clock = time.monotonic()
        if self._retention_at is None or clock - self._retention_at >= self.retention_every_s:
            self._retention_at = clock
            await self._apply_retention(now)

    def _stuck(self, agent: SessionAgent, now: datetime) -> bool:
        return (now - agent.step_started_at).total_seconds() > agent.config.step_timeout_s + self.stuck_grace_s

    def _expired(self, agent: SessionAgent, now: datetime) -> bool:
        limit = agent.config.pause_expiry_s or self.pause_expiry_s
        return (now - agent.status_changed_at).total_seconds() > limit

    async def _fail_stuck(self, agent: SessionAgent, now: datetime) -> None:
        seconds = (now - agent.step_started_at).total_seconds()
        log.error("session %s stuck in a step for %.0fs; failing it agent=%s", agent.session_id, seconds,
                  agent.agent_id)
        if agent.runner is not None and not agent.runner.done():
            agent.runner.cancel()
            await asyncio.wait({agent.runner}, timeout=self.stop_grace_s)
        agent.step_started_at = agent.heartbeat_at = None
        agent.last_error = f"stuck: a step ran {seconds:.0f}s, past its {agent.config.step_timeout_s}s timeout"
        await agent.set_status("error", "stuck")

    async def _expire(self, agent: SessionAgent) -> None:
        log.warning("session %s paused too long; stopping it agent=%s", agent.session_id, agent.agent_id)
        agent.request_stop()
        agent.request_resume()
        if agent.runner is not None:
            await asyncio.wait({agent.runner}, timeout=self.stop_grace_s)
        await agent.set_status("stopped", "pause_expired")

    async def _apply_retention(self, now: datetime) -> None:
        old = await self.persist.finished_sessions_before(now - timedelta(seconds=self.retention_s))
        if not old:
            return
        ids = [row["session_id"] for row in old]
        if self.keep_summaries and self.archiver is not None:
            await self.archiver.ensure_sessions(old)
        await self.persist.delete_sessions(ids, keep_summaries=self.keep_summaries)
        for session_id in ids:
            self.sessions.sessions.pop(session_id, None)
        log.info("retention: removed %d finished sessions and their steps%s", len(ids),
                 " (summaries kept)" if self.keep_summaries else "")
