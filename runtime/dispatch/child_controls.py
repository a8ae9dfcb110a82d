"""The parent's and the child's side of sub-agent actions: ``child_result``
(a child's outcome reaches its parent) and ``child_message`` (a parent's
follow-up reaches its child).

Both put one inbox item into a session, whatever state it is in: queued if it
is live, kept for a failed one's resume, and a finished (``done``) one is woken
to run again.  The item's id is its report's key, and ``add_inbox_item``
refuses an id already queued or used, so an action applied twice after a crash
changes nothing.  How outcomes are reported (once per generation) is
runtime/session/child_sessions.py; these are the handlers the action table
(runtime/dispatch/actions.py) routes to.
"""
from __future__ import annotations

import asyncio
import logging

from domain.errors import ActionError
from domain.statuses import SESSION_FINISHED, TOOL_CALL_ENDED
from monikers.moniker_registry import MonikerRegistry
from runtime.base.agent_core import holds
from runtime.base.fence import SessionLost
from runtime.session.child_sessions import has_child_results, item_data, item_text, next_generation, wakeable
from runtime.session.live_sessions import SessionRegistry
from runtime.session.agent import SessionAgent, SessionFactory
from runtime.dispatch.tool_controls import record_decision
from runtime.session.tool_runner import capped_result, now

log = logging.getLogger("runtime.child_sessions")


class ChildControls:
    """Handlers of ``child_result`` (for a parent) and ``child_message`` (for a child)."""

    def __init__(self, sessions: SessionRegistry, monikers: MonikerRegistry, factory: SessionFactory):
        self.sessions = sessions
        self.monikers = monikers
        self.factory = factory
        self.persist = factory.persist

    async def took_effect(self, action: dict) -> bool:
        """Whether the action's item (its key) is in its session already, or its
        outcome ended the waiting ``spawn_agent`` call."""
        payload = action["payload"]
        key = payload.get("key")
        if not isinstance(key, str):
            return False
        if payload.get("wait_call"):
            row = await self.persist.get_tool_call(payload["wait_call"])
            if row is not None and row.get("decided_by") == key:
                return True
        agent = self.sessions.get(action["session_id"])
        snapshot = agent.snapshot() if agent is not None else await self.persist.load_snapshot(action["session_id"])
        if snapshot is None or not holds(snapshot, key):
            return False
        if agent is not None:  # held in memory: the save that carried it may have failed
            await agent.save()
        return True

    # ---- child_result -----------------------------------------------------

    async def child_result(self, action: dict, payload: dict) -> None:
        key = payload.get("key")
        if not isinstance(key, str) or not payload.get("child_session_id"):
            raise ActionError("payload names no key and child_session_id")
        if payload.get("wait_call") and await self._end_wait_call(action, payload):
            return
        text, data = item_text(payload), item_data(payload)
        source = {"kind": "child", "agent_id": payload.get("child_agent_id"),
                  "session_id": payload["child_session_id"], "generation": payload.get("generation")}
        await self.deliver(action, key, "child_result", text, data, source, wake=True)

    async def deliver(self, action: dict, key: str, kind: str, text: str, data, source, *, wake: bool,
                      reactivate_reason: str = "woken") -> str:
        """Put one inbox item into a session: queued if it is live, kept for a
        failed one, and a finished one is woken (``wake``).  Returns what happened;
        raises SessionLost for a session live on another worker (the dispatcher
        hands the action back to the queue, for its owner)."""
        session_id = action["session_id"]
        agent = self.sessions.get(session_id)
        if agent is not None and agent.finished and agent.runner is not None and not agent.runner.done():
            await asyncio.gather(agent.runner, return_exceptions=True)  # it may wake itself as it ends
        agent = await self._unless_stale(agent)
        if agent is not None and not agent.finished:
            agent.add_inbox_item(key, kind, text, data=data, source=source)
            # Saved also when memory held the item already: the attempt that queued it
            # may have raised on a failed save (handlers.SessionControls._saved).
            await agent.save()
            return "queued"
        snapshot = agent.snapshot() if agent is not None else await self.persist.load_snapshot(session_id)
        if snapshot is None:
            raise ActionError(f"unknown session {session_id}")
        if holds(snapshot, key):
            return "duplicate"
        status = snapshot["status"]
        if agent is None and status not in SESSION_FINISHED:
            # Live on another worker (which woke or adopted it since this action was
            # claimed), or waiting for its adoption: its runner takes the item.  Written
            # into the stored snapshot here, the runner's next save dropped it (two
            # workers: a parent woken by its own runner lost a child's second result).
            raise SessionLost(session_id)
        if status == "stopped":
            log.info("session %s is stopped; %s %s not delivered", session_id, kind, key)
            return "dropped"
        if not (wake and wakeable(status, snapshot.get("status_reason"))):
            # kept for a resume (error), or for nobody (a limit ended it): never lost
            item = {"action_id": key, "kind": kind, "text": text, "data": data, "source": source}
            kept = dict(snapshot, pending_guidance=[*(snapshot.get("pending_guidance") or []), item])
            if agent is not None:
                agent.pending_guidance = kept["pending_guidance"]
                await agent.save()
            else:
                await self.persist.save_snapshot(kept)
            return "kept"
        agent = self._session_from(snapshot, agent)
        agent.add_inbox_item(key, kind, text, data=data, source=source)
        next_generation(agent)
        agent.note_status("running", reactivate_reason)
        await agent.save()
        self.sessions.add(agent)
        agent.start()
        log.info("session %s %s by %s %s", session_id, reactivate_reason, kind, key)
        return reactivate_reason

    async def _unless_stale(self, agent: SessionAgent | None) -> SessionAgent | None:
        """The finished session this worker holds in memory, unless another
        worker has run it since (a finished session is anyone's to wake: a
        child's result claimed there woke it, it stepped and finished again).
        Woken from the stale copy, it ran its iterations a second time; its
        stored record is the one to wake then."""
        if agent is None or not agent.finished:
            return agent
        stored = await self.persist.load_snapshot(agent.session_id)
        if stored is None or (stored.get("iteration"), stored.get("status")) == (agent.iteration, agent.status):
            return agent
        log.info("session %s ran elsewhere since it finished here (iteration %s, here %s); its stored record is "
                 "used agent=%s", agent.session_id, stored.get("iteration"), agent.iteration, agent.agent_id)
        self.sessions.remove(agent.session_id)
        return None

    def _session_from(self, snapshot: dict, agent: SessionAgent | None) -> SessionAgent:
        """The session object to run again: the finished one in memory, or a new
        one from its snapshot (finished under another worker or an earlier life)."""
        if agent is not None:
            return agent
        try:
            moniker = self.monikers.get(snapshot["moniker"])
        except Exception:
            raise ActionError(f"moniker {snapshot['moniker']!r} is not installed") from None
        return self.factory.make(dict(snapshot), moniker)

    async def _end_wait_call(self, action: dict, payload: dict) -> bool:
        """``spawn_agent {wait: true}``: the child's (first) outcome is the call's
        result.  False when the call no longer waits (then the inbox gets it)."""
        call_id, key = payload["wait_call"], payload["key"]
        agent = self.sessions.get(action["session_id"])
        phase = agent.tool_phase if agent is not None else None
        if phase is not None:  # the spawn call may still be being recorded
            await phase.wait_for_call(call_id)
        row = phase.row(call_id) if phase is not None else None
        if row is None:
            row = await self.persist.get_tool_call(call_id)
        if row is None or row["session_id"] != action["session_id"]:
            return False
        if row.get("decided_by") == key:
            return True  # this outcome ended the call already
        if row["status"] in TOOL_CALL_ENDED or agent is None or agent.finished:
            return False
        ids = {"agent_id": payload["child_agent_id"], "session_id": payload["child_session_id"],
               "name": payload.get("name"), "generation": payload.get("generation")}
        if payload["status"] == "done":
            change = {"status": "success", "error": None,
                      "result": capped_result({**ids, "status": "done", "text": payload.get("text"),
                                               "data": payload.get("data"), "usage": payload.get("usage")})}
        else:
            change = {"status": "failed", "error": item_text(payload)[:4000]}
        row = await record_decision(agent.tools, agent, row, key, dict(change, finished_at=now()))
        log.info("tool call %s (spawn_agent, wait) ended %s by child %s", call_id, row["status"],
                 payload["child_session_id"])
        return True

    # ---- wake ---------------------------------------------------------------

    async def wake(self, action: dict, payload: dict) -> None:
        """A parent that a crash left ``done`` with children's results unread
        (queued by the recovery scan, runtime/session/child_sessions.py ``wake_left_done``)
        runs again.  Applied in the session's lane, after any ``child_result``
        before it; nothing to do when the session is live or has nothing unread."""
        session_id = action["session_id"]
        agent = self.sessions.get(session_id)
        if agent is not None and agent.finished and agent.runner is not None and not agent.runner.done():
            await asyncio.gather(agent.runner, return_exceptions=True)  # it may wake itself as it ends
        agent = await self._unless_stale(agent)
        if agent is not None and not agent.finished:
            return
        snapshot = agent.snapshot() if agent is not None else await self.persist.load_snapshot(session_id)
        if snapshot is None:
            raise ActionError(f"unknown session {session_id}")
        if not (wakeable(snapshot["status"], snapshot.get("status_reason")) and has_child_results(snapshot)):
            return
        agent = self._session_from(snapshot, agent)
        next_generation(agent)
        agent.note_status("running", "woken")
        await agent.save()
        self.sessions.add(agent)
        agent.start()
        log.info("session %s woken by the children's results a crash left unread (action %s)", session_id,
                 action["id"])

    async def woken(self, action: dict) -> bool:
        """``wake``'s effect: the session holds no unread child result while done."""
        agent = self.sessions.get(action["session_id"])
        snapshot = agent.snapshot() if agent is not None else await self.persist.load_snapshot(action["session_id"])
        return snapshot is None or snapshot["status"] != "done" or not has_child_results(snapshot)

    # ---- child_message ----------------------------------------------------

    async def child_message(self, action: dict, payload: dict) -> None:
        """A parent's follow-up: the child's next step gets it; a finished
        (``done``) child is reactivated, and its next outcome is reported again."""
        key, text = payload.get("key"), payload.get("text")
        if not isinstance(key, str) or not isinstance(text, str) or not text.strip():
            raise ActionError("payload names no key and text")
        source = payload.get("source") if isinstance(payload.get("source"), dict) else {"kind": "parent"}
        outcome_ = await self.deliver(action, key, "message", text, None, source, wake=True,
                                      reactivate_reason="reactivated")
        if outcome_ == "dropped":
            raise ActionError(f"cannot message: session {action['session_id']} is stopped")
