"""The action table: every action type a worker applies, and the function that applies it.

Actions are how the API (app.py), other sessions and the service itself steer
sessions: each is a row of the queue that the dispatcher (runtime/dispatch/dispatcher.py)
claims and hands to :meth:`ActionTable.apply`, in order per session.  This file
is where to look up what an action does: :meth:`ActionTable.__init__` declares
the whole table, type by type, and says where each handler lives.

A handler gets the action row and its payload.  It raises :class:`ActionError`
for a request that cannot be applied (the action is marked failed with that
message); returning normally marks it done.  Every handler is idempotent: an
action being applied when its worker died is applied again after the restart,
and one that took effect then ends done.  :meth:`ActionTable.took_effect`
tells, per type, whether an action left its effect already; the dispatcher
asks it before parking an action whose attempts never ended.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Awaitable, Callable

from domain import trace_context
from domain.errors import ActionError
from monikers.moniker_registry import MonikerRegistry
from runtime.dispatch.child_controls import ChildControls
from runtime.dispatch.dispatcher import BATCH_SESSIONS
from runtime.dispatch.handlers import SessionControls
from runtime.session.live_sessions import SessionRegistry
from runtime.dispatch.questions import QuestionDesk
from runtime.session.agent import SessionFactory
from runtime.dispatch.tool_controls import ToolControls

if TYPE_CHECKING:
    from store import Store

Handler = Callable[[dict, dict], Awaitable[None]]


class ActionTable:
    def __init__(self, sessions: SessionRegistry, monikers: MonikerRegistry, factory: SessionFactory,
                 store: Store, *, destroy_grace_s: float = 5.0):
        self.lifecycle = SessionControls(sessions, monikers, factory, destroy_grace_s=destroy_grace_s)
        self.tools = ToolControls(sessions, factory.tools)
        self.children = ChildControls(sessions, monikers, factory)
        # Also an observer (posting questions, timing them out): runtime/dispatch/questions.py's attach.
        self.questions = QuestionDesk(store, sessions, self.tools)
        self.by_type: dict[str, Handler] = {
            # A session's life (runtime/dispatch/handlers.py).
            "create": self._create,
            "pause": self.lifecycle.pause,
            "resume": self.lifecycle.resume,
            "interrupt": self.lifecycle.interrupt,
            "inbox_item": self.lifecycle.inbox_item,
            "destroy": self.lifecycle.destroy,
            # A tool call that waits on someone (runtime/dispatch/tool_controls.py).
            "tool_approve": self.tools.approve,
            "tool_deny": self.tools.deny,
            "tool_result": self.tools.result,
            # Sub-agents: a child's outcome for its parent, a parent's follow-up
            # for its child (runtime/dispatch/child_controls.py).
            "child_result": self.children.child_result,
            "child_message": self.children.child_message,
            # A parent a crash left done with children's results unread (the recovery scan).
            "wake": self.children.wake,
            # A human's answer to ask_user, or its timeout (runtime/dispatch/questions.py).
            "answer": self.questions.answer,
        }
        # What each type leaves behind once applied, so a redelivery can tell.
        lifecycle, tools, children = self.lifecycle.took_effect, self.tools.took_effect, self.children.took_effect
        self.effects: dict[str, Callable[[dict], Awaitable[bool]]] = {
            "create": lifecycle, "pause": lifecycle, "resume": lifecycle, "interrupt": lifecycle,
            "inbox_item": lifecycle, "destroy": lifecycle,  # the session, or its id in the snapshot
            "tool_approve": tools, "tool_deny": tools, "tool_result": tools,
            "answer": tools,  # the call's row names the deciding action in decided_by
            "child_result": children, "child_message": children,  # the item's key in the session
            "wake": self.children.woken,  # nothing left unread while done
        }

    async def apply(self, action: dict) -> None:
        """Apply one action (the dispatcher's ``handle``)."""
        handler = self.by_type.get(action.get("type"))
        if handler is None:
            raise ActionError(f"unknown action type {action.get('type')!r}")
        payload = action.get("payload")
        if not isinstance(payload, dict):
            raise ActionError("payload must be a JSON object")
        if not action.get("agent_id") or not action.get("session_id"):
            raise ActionError("action names no agent_id and session_id")
        await handler(action, trace_context.without(payload))  # a request's trace context is tracing's alone

    async def took_effect(self, action: dict) -> bool:
        """Whether the action was applied already, in an attempt that did not end."""
        check = self.effects.get(action.get("type"))
        if check is None or not isinstance(action.get("payload"), dict) or not action.get("session_id"):
            return False
        return await check(action)

    async def _create(self, action: dict, payload: dict) -> None:
        """A create is told which sessions of its poll batch the dispatcher
        found in the store, so it need not look its own up."""
        await self.lifecycle.create(action, payload, BATCH_SESSIONS.get())
