"""Agents taking part in conversations, as a runtime observer.

A session created with a conversation_id becomes a participant of it (joining
is idempotent; app.py usually registered it already when it accepted the
create).  Every persisted step with text becomes an agent message in each
conversation the session is in, carrying the step's iteration and tokens,
written after the step row is durable.  User messages travel the other way,
through the action queue (see api/routes/conversations.py), not through here.

Which conversations a session is in can change from app.py (POST
.../participants), so memberships are read with one query for all sessions and
cached for ``refresh_s``: a session joined that way starts posting within it.
The messages written are handed to ``on_message`` (the live relay) once durable.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Awaitable, Callable

if TYPE_CHECKING:
    from store import Store

log = logging.getLogger("runtime.conversations")


class ConversationLog:
    def __init__(self, store: Store, on_message: Callable[[dict], Awaitable[None]] | None = None,
                 refresh_s: float = 2.0):
        self.store = store
        self.on_message = on_message
        self.refresh_s = refresh_s
        self._memberships: dict[str, list[str]] = {}
        self._read_at = float("-inf")
        self._refresh_lock = asyncio.Lock()

    async def session_created(self, snapshot: dict) -> None:
        conversation_id = snapshot.get("conversation_id")
        if not conversation_id:
            return
        if await asyncio.to_thread(self.store.conversations.get, conversation_id) is None:
            log.warning("session %s names unknown conversation %s; not joining", snapshot["session_id"],
                        conversation_id)
            return
        _, committed = await asyncio.to_thread(
            self.store.conversations.submit_join, conversation_id, kind="agent",
            agent_id=snapshot["agent_id"], session_id=snapshot["session_id"])
        await asyncio.wrap_future(committed)
        self._read_at = float("-inf")  # re-read memberships at the next step

    async def step_persisted(self, snapshot: dict, step: dict) -> None:
        if not step.get("text"):
            return
        for conversation_id in await self.conversations_of(snapshot, step):
            await self._post(conversation_id, step)

    async def conversations_of(self, snapshot: dict, step: dict) -> list[str]:
        """The session's own conversation, those it joined, and those whose
        messages this step answered (a reply goes where the message came from,
        even before the membership cache has caught up)."""
        async with self._refresh_lock:
            if time.monotonic() - self._read_at > self.refresh_s:
                self._memberships = await asyncio.to_thread(self.store.conversations.agent_memberships)
                self._read_at = time.monotonic()
        sources = [(g.get("source") or {}).get("conversation_id") for g in step.get("guidance") or []
                   if isinstance(g, dict)]
        found = [snapshot.get("conversation_id"), *self._memberships.get(snapshot["session_id"], []), *sources]
        return list(dict.fromkeys(c for c in found if isinstance(c, str) and c))

    async def _post(self, conversation_id: str, step: dict) -> None:
        row, committed = self.store.conversations.submit_message({
            "conversation_id": conversation_id, "sender_type": "agent", "agent_id": step["agent_id"],
            "session_id": step["session_id"], "text": step["text"],
            "data": {"step_id": step["id"], "data": step.get("data")},
            "status": step["status"], "event_type": "step", "iteration": step["iteration"],
            "step_token": step.get("step_token"), "next_step_token": step.get("next_step_token"),
            "notes": step.get("notes"),
        })
        await asyncio.wrap_future(committed)
        if self.on_message is not None:
            await self.on_message(row)
