"""The handlers of the actions that start, steer and end a session: create,
pause, resume, interrupt, inbox_item and destroy.  Which action type goes to
which handler is declared in runtime/dispatch/actions.py.

A handler raises :class:`ActionError` for a request that cannot be applied (it
is then marked failed with that message); returning normally marks it done.
Handlers are idempotent, because after a crash an action that was being applied
may be applied again: creating an existing session, pausing a paused one or
delivering the same guidance twice changes nothing.  And an action applied
again after it took effect ends done, even when the session has finished
since: a pause or resume notes its id in the snapshot it saves, guidance is
found by its id (:meth:`SessionControls.took_effect` says which effect each
leaves; the dispatcher asks it before it parks an action).
"""
import asyncio
import logging
import re

from pydantic import ValidationError

from domain.errors import ActionError
from domain.session_config import CreatePayload
from domain.statuses import SESSION_FINISHED
from monikers.moniker_registry import MonikerRegistry, UnknownMoniker
from runtime.session import child_sessions
from runtime.session import session_tree
from runtime.base.agent_core import holds
from runtime.base.fence import SessionLost
from runtime.session.fork import ForkError, fork_snapshot
from runtime.session.replay import ReplayError, replay_snapshot
from runtime.session.live_sessions import SessionRegistry
from runtime.session.agent import SessionAgent, SessionFactory

log = logging.getLogger("runtime.handlers")

MAX_GUIDANCE = 20_000
INBOX_KIND = re.compile(r"[a-z][a-z0-9_]{0,63}")


class SessionControls:
    def __init__(self, sessions: SessionRegistry, monikers: MonikerRegistry, factory: SessionFactory, *,
                 destroy_grace_s: float = 5.0):
        self.sessions = sessions
        self.monikers = monikers
        self.factory = factory  # makes the sessions we start: owner, heartbeat, tools, store, observers
        self.persist = factory.persist
        self.observers = factory.observers
        self.destroy_grace_s = destroy_grace_s

    # ---- create ---------------------------------------------------------

    async def create(self, action: dict, payload: dict, known_sessions: frozenset[str] | None = None) -> None:
        """Start a session (a fork of another when the payload says ``fork``).
        ``known_sessions``: the sessions of the action's poll batch found in the
        store (one lookup for the whole batch), or None to look this one up."""
        session_id = action["session_id"]
        if self.sessions.get(session_id) or (session_id in known_sessions if known_sessions is not None
                                              else await self.persist.load_snapshot(session_id)):
            log.info("session %s exists already; create action %s changes nothing", session_id, action["id"])
            return
        fork = payload.get("fork")  # POST /api/sessions/<id>/fork (runtime/session/fork.py)
        replay = payload.get("replay")  # POST /api/sessions/<id>/replay (runtime/session/replay.py)
        payload = {k: v for k, v in payload.items() if k not in ("fork", "replay")}
        link = child_sessions.create_fields(payload)  # a sub-agent's parent, tree and first inbox (spawn_agent)
        try:
            spec = CreatePayload.model_validate(payload)
            moniker = self.monikers.get(spec.moniker)
        except ValidationError as exc:
            raise ActionError(f"invalid create payload: {exc.errors()[0]['msg']}") from None
        except UnknownMoniker:
            raise ActionError(f"unknown moniker {payload.get('moniker')!r}") from None
        snapshot = {
            "agent_id": action["agent_id"], "session_id": session_id, "task": spec.task, "name": spec.name,
            "config": spec.config.model_dump(), "status": "running", "iteration": -1,
            "next_step_token": moniker.initial_step, "state": {},
            "conversation_id": spec.conversation_id or action.get("conversation_id"),
            "created_at": action.get("created_at"),
            "parent_agent_id": spec.parent_agent_id, "parent_session_id": spec.parent_session_id,
            **link,  # a sub-agent's tree, generation and first inbox (runtime/session/child_sessions.py)
        }
        if fork is not None:
            try:
                snapshot = await fork_snapshot(self.persist, action, fork, snapshot)
            except ForkError as exc:
                raise ActionError(f"cannot fork: {exc}") from None
        elif replay is not None:
            try:
                snapshot = await replay_snapshot(self.persist, replay, snapshot)
            except ReplayError as exc:
                raise ActionError(f"cannot replay: {exc}") from None
        if await child_sessions.parent_destroyed(self.persist, self.sessions, link):
            snapshot.update(status="stopped", status_reason="parent_destroyed")
        agent = self.factory.make(snapshot, moniker)
        await agent.save()
        self.sessions.add(agent)
        await self.observers.notify("session_created", agent.snapshot())
        if not agent.finished:
            agent.start()
        log.info("session %s created agent=%s moniker=%s action=%s", session_id, agent.agent_id,
                 moniker.name, action["id"])

    # ---- what an action left behind ---------------------------------------

    async def took_effect(self, action: dict) -> bool:
        """Whether this action was applied already (in an attempt that did not
        end): its session exists (create), is over (destroy: nothing left to
        do), or holds its id (a pause or resume noted, an inbox item queued or used)."""
        snapshot = await self._snapshot(action)
        if snapshot is None:
            return False
        if action["type"] == "create":
            return True
        if action["type"] == "destroy":
            took = snapshot["status"] in SESSION_FINISHED
        else:
            took = holds(snapshot, action["id"])
        if took:
            await self._saved(action)
        return took

    async def _snapshot(self, action: dict) -> dict | None:
        agent = self.sessions.resolve(action["agent_id"], action.get("session_id"))
        return agent.snapshot() if agent is not None else await self.persist.load_snapshot(action["session_id"])

    async def _applied_before(self, action: dict) -> bool:
        """The action's id is on its session already: applied in an attempt that
        did not end (the session may have finished since, which must not fail it)."""
        snapshot = await self._snapshot(action)
        if snapshot is not None and holds(snapshot, action["id"]):
            await self._saved(action)
            log.info("action %s (%s) was applied before its worker stopped; done", action["id"], action["type"])
            return True
        return False

    async def _saved(self, action: dict) -> None:
        """An effect found in a running session's memory may never have reached
        the store: the attempt that made it raised when its save failed (the
        object store was down), and memory kept the change.  Save that memory
        before the action ends done, or a pause is "done" while the store says
        running for good (the session, paused here, writes nothing more)."""
        agent = self.sessions.resolve(action["agent_id"], action.get("session_id"))
        if agent is not None:
            await agent.save()

    # ---- controls -------------------------------------------------------

    async def _live(self, action: dict, verb: str) -> SessionAgent:
        agent = self.sessions.resolve(action["agent_id"], action.get("session_id"))
        if agent is not None and not agent.finished:
            return agent
        snapshot = agent.snapshot() if agent else await self.persist.load_snapshot(action["session_id"])
        if snapshot is None:
            raise ActionError(f"unknown session {action['session_id']}")
        if agent is None and snapshot["status"] not in SESSION_FINISHED:
            # Not finished, yet not run here any more: its runner crashed (the store failed
            # under it) and waits for the next adoption round (runtime/worker/revival.py), or
            # another worker adopted it since this action was claimed.  The action is for
            # whoever runs it next, not a refusal: it was failed "cannot resume: session ...
            # is running" (the kill loop on object storage, a resume and an inbox item).
            raise SessionLost(action["session_id"])
        raise ActionError(f"cannot {verb}: session {snapshot['session_id']} is {snapshot['status']}")

    async def pause(self, action: dict, payload: dict) -> None:
        """Pause at the next step boundary; ``tree: true`` pauses its descendants too."""
        reason = "budget" if payload.get("reason") == "budget" else "user"
        below = {"tree": True, "reason": reason}
        if await self._applied_before(action):
            await self._cascade_again(action, "pause", below)
            return
        if payload.get("tree"):
            agent = self.sessions.resolve(action["agent_id"], action.get("session_id"))
            if agent is None or agent.finished:  # a finished parent may still have children at work
                await self._cascade_from_finished(action, "pause", below)
                return
        agent = await self._live(action, "pause")
        if agent.status != "paused":
            agent.request_pause()
            agent.note_applied(action["id"])
            await agent.set_status("paused", reason)
        if payload.get("tree"):
            await session_tree.cascade(self.persist, agent.session_id, "pause", below, cause=action["id"])

    async def _cascade_from_finished(self, action: dict, verb: str, payload: dict) -> None:
        snapshot = await self.persist.load_snapshot(action["session_id"])
        if snapshot is None:
            raise ActionError(f"unknown session {action['session_id']}")
        await session_tree.cascade(self.persist, snapshot["session_id"], verb, payload, cause=action["id"])

    async def _cascade_again(self, action: dict, verb: str, payload: dict) -> None:
        """A tree control applied before its worker stopped: the crash may have
        come between its save and its cascade, so cascade again (children that
        have it already are skipped: session_tree.cascade)."""
        if (action.get("payload") or {}).get("tree"):
            await session_tree.cascade(self.persist, action["session_id"], verb, payload, cause=action["id"])

    async def resume(self, action: dict, payload: dict) -> None:
        """Resume a paused session (optionally raising its budget), or retry a failed one."""
        below = {"tree": True, **({"reason": payload["reason"]} if payload.get("reason") else {})}
        if await self._applied_before(action):
            await self._cascade_again(action, "resume", below)
            return
        agent = self.sessions.resolve(action["agent_id"], action.get("session_id"))
        failed = agent if agent is not None and agent.status == "error" else None
        if failed is None and agent is None:
            snapshot = await self.persist.load_snapshot(action["session_id"])
            if snapshot and snapshot["status"] == "error":  # failed under another (or an earlier) worker
                failed = snapshot
        if failed is not None:
            await self._restart_after_error(action, failed, payload)
            return
        if payload.get("tree") and (agent is None or agent.finished):
            await self._cascade_from_finished(action, "resume", below)
            return
        agent = await self._live(action, "resume")
        if payload.get("reason") and (agent.status, agent.status_reason) != ("paused", payload["reason"]):
            return  # a tree's budget resume passes over sessions paused for another reason
        _raise_budget(agent, payload)
        for_budget = (agent.status, agent.status_reason) == ("paused", "budget")
        if agent.status == "paused":
            agent.request_resume()
            agent.note_applied(action["id"])
            await agent.set_status(*agent.status_after_resume())
        elif payload.get("budget_tokens") or payload.get("budget_cost"):
            await agent.save()  # a raised budget is read by the tree's other sessions
        if payload.get("tree"):
            await session_tree.cascade(self.persist, agent.session_id, "resume", below, cause=action["id"])
        elif for_budget:  # its budget paused its tree: resuming it resumes them
            await session_tree.cascade(self.persist, agent.session_id, "resume", {"tree": True, "reason": "budget"},
                                       cause=action["id"])

    async def _restart_after_error(self, action: dict, failed: SessionAgent | dict, payload: dict) -> None:
        """Resume on a failed session retries its failed step as the next iteration."""
        old = failed.snapshot() if isinstance(failed, SessionAgent) else failed
        old = child_sessions.bump_snapshot_generation(old)  # its error was reported; its next outcome will be too
        snapshot = dict(old, status="running", status_reason="resumed_after_error")
        try:
            moniker = self.monikers.get(snapshot["moniker"])
        except UnknownMoniker:
            raise ActionError(f"moniker {snapshot['moniker']!r} is not installed") from None
        agent = self.factory.make(snapshot, moniker)
        _raise_budget(agent, payload)
        agent.note_applied(action["id"])
        await agent.save()
        self.sessions.add(agent)
        agent.start()
        log.info("session %s restarted after error at iteration %d", agent.session_id, agent.iteration + 1)

    async def interrupt(self, action: dict, payload: dict) -> None:
        """Queue guidance for the next step (kept durably until a step uses it);
        ``tree: true`` sends it on to every unfinished session below too."""
        guidance = payload.get("guidance")
        if not isinstance(guidance, str) or not guidance.strip() or len(guidance) > MAX_GUIDANCE:
            raise ActionError(f"guidance must be a non-empty string of at most {MAX_GUIDANCE} characters")
        source = payload.get("source") if isinstance(payload.get("source"), dict) else None
        below = {"guidance": guidance, "tree": True}
        if await self._applied_before(action):  # queued (or used) already: also when the session ended since
            await self._cascade_again(action, "interrupt", below)
            return
        agent = self.sessions.resolve(action["agent_id"], action.get("session_id"))
        if payload.get("tree") and await self._ended(action, agent):  # its sub-agents may still be at work
            await session_tree.cascade(self.persist, action["session_id"], "interrupt", below, cause=action["id"])
            return
        if agent is None or agent.status != "error":  # a failed session keeps guidance for its resume
            agent = await self._live(action, "interrupt")
        # a message posted in a conversation is kind "message"; other guidance keeps kind "guidance"
        kind = "message" if source and source.get("conversation_id") else "guidance"
        if agent.add_inbox_item(action["id"], kind, guidance, source=source):
            await agent.save()  # durable before the action is marked done
        if payload.get("tree"):
            await session_tree.cascade(self.persist, agent.session_id, "interrupt", below, cause=action["id"])

    async def _ended(self, action: dict, agent: SessionAgent | None) -> bool:
        """Whether the action's session is done or stopped (a failed one keeps
        guidance for its resume); read from the store when it is not run here."""
        if agent is not None:
            return agent.status in ("done", "stopped")
        snapshot = await self.persist.load_snapshot(action["session_id"])
        if snapshot is None:
            raise ActionError(f"unknown session {action['session_id']}")
        return snapshot["status"] in ("done", "stopped")

    async def inbox_item(self, action: dict, payload: dict) -> None:
        """Queue an inbox item of any kind (runtime/base/inbox.py): ``{kind, text,
        data?, source?}``.  Internal: not offered over HTTP; parts of the service
        (and tests) enqueue it to hand a session a child's result, a note...
        Delivered twice (after a crash), it is queued once."""
        kind, text = payload.get("kind"), payload.get("text")
        if not isinstance(kind, str) or not INBOX_KIND.fullmatch(kind):
            raise ActionError("inbox_item needs a kind: lowercase letters, digits and _")
        if text is not None and (not isinstance(text, str) or len(text) > MAX_GUIDANCE):
            raise ActionError(f"inbox_item text must be a string of at most {MAX_GUIDANCE} characters")
        source = payload.get("source") if isinstance(payload.get("source"), dict) else None
        if await self._applied_before(action):
            return
        agent = self.sessions.resolve(action["agent_id"], action.get("session_id"))
        if agent is None or agent.status != "error":
            agent = await self._live(action, "deliver to")
        if agent.add_inbox_item(action["id"], kind, text, data=payload.get("data"), source=source):
            await agent.save()

    async def destroy(self, action: dict, payload: dict) -> None:
        """Graceful: resume if paused, ask to stop, wait, and cancel a step that hangs.
        Its sub-agents are destroyed after it (unless they chose ``abandon``),
        also when it was already over: applied again after a crash, it cascades again."""
        await self._destroy_one(action)
        await session_tree.cascade(self.persist, action["session_id"], "destroy", {}, cause=action["id"])

    async def _destroy_one(self, action: dict) -> None:
        agent = self.sessions.resolve(action["agent_id"], action.get("session_id"))
        if agent is None or agent.finished:
            snapshot = agent.snapshot() if agent else await self.persist.load_snapshot(action["session_id"])
            if snapshot is None:
                raise ActionError(f"unknown session {action['session_id']}")
            return  # already over: nothing to stop
        await agent.set_status("stopping", "user")
        agent.request_stop()
        agent.request_resume()
        if agent.runner is not None:
            done, _ = await asyncio.wait({agent.runner}, timeout=self.destroy_grace_s)
            if not done:
                log.warning("session %s did not stop within %.1fs; cancelling its step", agent.session_id,
                            self.destroy_grace_s)
                agent.runner.cancel()
                await asyncio.gather(agent.runner, return_exceptions=True)
        if agent.status == "stopping":  # not finished on its own meanwhile
            await agent.end_open_calls()  # none of its last step's calls is left without an end
            await agent.set_status("stopped", "destroyed")


def _raise_budget(agent: SessionAgent, payload: dict) -> None:
    """A resume may carry a higher budget (``budget_tokens``/``budget_cost``)."""
    raised = {}
    for key in ("budget_tokens", "budget_cost"):
        value = payload.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ActionError(f"{key} must be a positive number")
        raised[key] = int(value) if key == "budget_tokens" else float(value)
    if raised:
        agent.replace_config(agent.config.model_copy(update=raised))
