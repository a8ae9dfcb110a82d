"""What the helpers of a session see of it: the fields and methods of
:class:`runtime.session.agent.SessionAgent` that child_sessions.py, replay.py,
session_tree.py and tool_runner.py use, declared as a protocol.

agent.py imports those helpers; if they named ``SessionAgent`` in turn (even
only for the type checker) the session room would be one knot of modules that
cannot be read or tested apart.  They name this protocol instead: whatever a
helper reads or changes of its session is listed here, and nowhere else, so a
new reach into the session is a line added to this file, in review.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from domain.session_config import SessionConfig
    from runtime.base.persistence import Persistence


class CallsLoaded(Protocol):
    """The tool phase's point of the session's interceptors (runtime/session/intercept.py)."""

    async def calls_loaded(self, agent: AgentView, iteration: int, rows: list[dict], changed: list[dict],
                           stored: set[str]) -> tuple[list[dict], list[dict]]: ...


class AgentView(Protocol):
    # who it is
    session_id: str
    agent_id: str
    config: SessionConfig
    persist: Persistence
    extra: dict
    # where it is
    status: str
    status_reason: str | None
    iteration: int
    last_error: str | None
    last_step_usage: dict | None
    # its inbox (runtime/base/agent_core.py InterruptMixin)
    pending_guidance: list[dict]
    used_guidance: list[str]
    # its tool phase
    intercept: CallsLoaded
    hooks: Any  # the profile's (profiles/hooks.py SessionHooks)
    tool_slots: asyncio.Semaphore

    @property
    def reuses_tool_results(self) -> bool: ...

    @property
    def stop_requested(self) -> bool: ...

    @property
    def stopping_for_restart(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    def snapshot(self) -> dict: ...

    def holds(self, action_id: str) -> bool: ...

    async def set_status(self, status: str, reason: str | None = None) -> None: ...

    async def save(self) -> None: ...

    def request_pause(self) -> None: ...

    async def stopped(self) -> None: ...

    async def reflect_waiting(self, reason: str | None) -> None: ...


class LiveSessions(Protocol):
    """The sessions this process runs, by id (runtime/session/live_sessions.py)."""

    def get(self, session_id: str) -> AgentView | None: ...
