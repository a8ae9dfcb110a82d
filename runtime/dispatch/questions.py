"""Questions to a human (``ask_user``, tools/ask_user.py), on the worker's side.

An ``ask_user`` call is an external tool call: its row waits in
``waiting_result`` (the session is ``waiting``, reason ``user``) and no step
runs.  This module does the rest, as a runtime observer plus the handler of
the ``answer`` action (declared in runtime/dispatch/actions.py):

- **Posting.**  When a question starts waiting (its step's calls were planned,
  recovered after a restart, or approved), it is posted as an agent message
  (``event_type`` ``question``) to the session's conversation and the
  conversations it is a participant of; and, when the session is a child
  (``parent_session_id``), to its *root* session's conversations as
  "<name> needs more information: <question>", with the child's ids in the
  message data.  A session in no conversation gets none created for it: its
  question is listed by ``GET /api/waiting`` and the "Needs you" page.  Each
  message's id is the tool call's id, so posting again after a crash finds it
  there and writes nothing: a question is posted once per conversation.
- **Answers** arrive as ``answer`` actions (``POST /api/sessions/<id>/answer``,
  or a user's reply in a conversation the question was posted to; see
  api/answers.py) and are applied like tool results (runtime/dispatch/tool_controls.py):
  checked against the row's status when applied, the row
  keeps the deciding action's id, so an answer applies exactly once and a
  second one fails with ``conflict:``.  An answer given through the API (the
  "Needs you" page, the CLI) is echoed as a user message into the
  conversations the question was posted to, so the thread reads whole.  The
  answer reaches the moniker as the call's result in the next
  ``frame_in.tool_results``; no ``answer`` inbox item is queued as well, so the
  model is not told the same thing twice.
- **Timeouts.**  A question with ``timeout_s`` gets a timer (its deadline
  counts from when the call was made, so a restart does not extend it).  When
  it fires on a still-open question it enqueues an ``answer`` action with
  ``timed_out``, so it is serialised with real answers by the session's action
  lane: whichever applies first wins, and a timeout that finds the question
  answered changes nothing.
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Awaitable, Callable

from domain.errors import ActionError
from runtime.session.live_sessions import SessionRegistry
from runtime.dispatch.tool_controls import ToolControls
from runtime.session.tool_runner import now
from tools import ask_user

if TYPE_CHECKING:
    from runtime.session.agent import SessionAgent
    from store import Store

log = logging.getLogger("runtime.questions")

MAX_DEPTH = 64  # parent links followed to find the root (a cycle cannot hang us)


class QuestionDesk:
    def __init__(self, store: Store, sessions: SessionRegistry, controls: ToolControls | None,
                 on_message: Callable[[dict], Awaitable[None]] | None = None):
        self.store = store
        self.sessions = sessions
        self.controls = controls  # the action table's, which decides tool calls
        self.on_message = on_message  # the live relay's conversation_message, or None
        self.timers: dict[str, asyncio.Task] = {}

    # ---- observer hooks ---------------------------------------------------

    async def tool_phase_loaded(self, agent: SessionAgent, rows: list[dict]) -> None:
        for row in rows:
            if row["name"] == ask_user.NAME and row["status"] == "waiting_result":
                self._arm(row)  # first: a question that cannot be posted still times out
                await self._post(agent, row)

    async def tool_call_updated(self, row: dict) -> None:
        if row["name"] != ask_user.NAME:
            return
        if row["status"] == "waiting_result" and row.get("decided_by"):  # approved: it waits for its answer now
            agent = self.sessions.get(row["session_id"])
            if agent is not None:
                self._arm(row)
                await self._post(agent, row)
        elif row["status"] not in ("waiting_result", "waiting_approval"):
            timer = self.timers.pop(row["id"], None)
            if timer is not None and timer is not asyncio.current_task():
                timer.cancel()

    # ---- posting ----------------------------------------------------------

    async def _post(self, agent: SessionAgent, row: dict) -> None:
        args = ask_user.parse_args(row.get("args"))
        if args is None:
            return
        snapshot = agent.snapshot()
        own = await self._conversations(snapshot)
        base = {"kind": "question", "tool_call_id": row["id"], "agent_id": agent.agent_id,
                "session_id": agent.session_id, "name": snapshot.get("name"), "question": args.question,
                "choices": args.choices, "default": args.default, "deadline": _iso(ask_user.deadline(row))}
        for conversation_id in own:
            await self._ensure(conversation_id, row, args.question, base)
        root = await self._root(snapshot)
        if root is None:
            return
        who = snapshot.get("name") or f"Agent {agent.agent_id}"
        text = f"{who} needs more information: {args.question}"
        data = {**base, "root_session_id": root["session_id"],
                "child": {"agent_id": agent.agent_id, "session_id": agent.session_id, "name": snapshot.get("name")}}
        for conversation_id in await self._conversations(root):
            if conversation_id not in own:
                await self._ensure(conversation_id, row, text, data)

    async def _conversations(self, snapshot: dict) -> list[str]:
        joined = await asyncio.to_thread(self.store.conversations.conversations_of_session, snapshot["session_id"])
        return list(dict.fromkeys(c for c in [snapshot.get("conversation_id"), *joined] if c))

    async def _root(self, snapshot: dict) -> dict | None:
        """The topmost ancestor (following parent_session_id), or None for a root."""
        root, seen = None, {snapshot["session_id"]}
        parent_id = snapshot.get("parent_session_id")
        while parent_id and parent_id not in seen and len(seen) < MAX_DEPTH:
            seen.add(parent_id)
            live = self.sessions.get(parent_id)
            parent = live.snapshot() if live is not None else await asyncio.to_thread(self.store.states.get, parent_id)
            if parent is None:
                break
            root, parent_id = parent, parent.get("parent_session_id")
        return root

    async def _ensure(self, conversation_id: str, row: dict, text: str, data: dict) -> None:
        conversations = self.store.conversations
        if await asyncio.to_thread(conversations.get_message, conversation_id, row["id"]) is not None:
            return  # posted before a restart
        message, committed = conversations.submit_message({
            "message_id": row["id"], "conversation_id": conversation_id, "sender_type": "agent",
            "agent_id": row["agent_id"], "session_id": row["session_id"], "text": text, "data": data,
            "event_type": "question", "iteration": row["iteration"]})
        await asyncio.wrap_future(committed)
        log.info("question %s of session %s posted to conversation %s", row["id"], row["session_id"],
                 conversation_id)
        if self.on_message is not None:
            await self.on_message(message)

    # ---- timeouts ---------------------------------------------------------

    def _arm(self, row: dict) -> None:
        when = ask_user.deadline(row)
        if when is None or (row["id"] in self.timers and not self.timers[row["id"]].done()):
            return
        self.timers[row["id"]] = asyncio.create_task(self._expire(row, when), name=f"ask_user-timeout:{row['id']}")

    async def _expire(self, row: dict, when: datetime) -> None:
        delay = (when - datetime.now(timezone.utc)).total_seconds()
        if delay > 0:
            await asyncio.sleep(delay)
        current = await asyncio.to_thread(self.store.tool_calls.get, row["id"])
        if current is None or current["status"] != "waiting_result":
            return
        queued = await asyncio.to_thread(self._time_out_queued, row)
        if queued is not None:  # armed again by a restart before the queue reached it
            log.info("question %s of session %s timed out; its action %s is queued already", row["id"],
                     row["session_id"], queued["id"])
            return
        action = await asyncio.to_thread(
            self.store.actions.enqueue, "answer", agent_id=row["agent_id"], session_id=row["session_id"],
            payload={"tool_call_id": row["id"], "timed_out": True})
        log.info("question %s of session %s timed out; action %s", row["id"], row["session_id"], action["id"])

    def _time_out_queued(self, row: dict) -> dict | None:
        """The time-out action of this question still in the queue, if any.  Each
        restart arms the timer again; with a backlog (a loaded worker restarted
        again and again) every one of them queued another, and the backlog grew."""
        for status in ("pending", "processing"):
            for action in self.store.actions.search(session_id=row["session_id"], type="answer", status=status,
                                                    limit=1000):
                payload = action.get("payload") or {}
                if payload.get("tool_call_id") == row["id"] and payload.get("timed_out") is True:
                    return action
        return None

    # ---- the answer action --------------------------------------------------

    async def answer(self, action: dict, payload: dict) -> None:
        if payload.get("timed_out") is True:
            await self._time_out(action)
            return
        text = payload.get("text")
        if not isinstance(text, str) or not text.strip() or len(text) > ask_user.MAX_ANSWER:
            raise ActionError(f"an answer must be a non-empty string of at most {ask_user.MAX_ANSWER} "
                                   "characters")
        by = payload.get("user_id") if isinstance(payload.get("user_id"), str) else None
        via = "conversation" if payload.get("via") == "conversation" else "api"

        def change(row: dict) -> dict:
            self._must_be_question(row)
            return dict(ask_user.answered(row, text, answered_by=by, via=via), finished_at=now())
        await self.controls.decide(action, "waiting_result", "answer", change)
        if via == "api":  # a reply in a conversation is there already; echo the others where it was asked
            try:
                await self._echo(action, text, by)
            except Exception:  # the answer is applied; a missing echo must not fail its action
                log.exception("answer %s applied but not echoed to its conversations", action["id"])

    async def _echo(self, action: dict, text: str, by: str | None) -> None:
        """The answer as a user message in each conversation the question was
        posted to (message id = the action's id: once, also when applied again)."""
        agent = self.sessions.get(action["session_id"])
        tool_call_id = action["payload"]["tool_call_id"]
        if agent is None:
            return
        snapshot = agent.snapshot()
        root = await self._root(snapshot)
        targets = [*await self._conversations(snapshot), *(await self._conversations(root) if root else [])]
        for conversation_id in dict.fromkeys(targets):
            if await asyncio.to_thread(self.store.conversations.get_message, conversation_id, tool_call_id) is None:
                continue  # the question was not posted there
            if await asyncio.to_thread(self.store.conversations.get_message, conversation_id, action["id"]):
                continue
            message, committed = self.store.conversations.submit_message({
                "message_id": action["id"], "conversation_id": conversation_id, "sender_type": "user",
                "user_id": by or "user", "text": text, "event_type": "answer",
                "data": {"kind": "answer", "tool_call_id": tool_call_id, "session_id": agent.session_id}})
            await asyncio.wrap_future(committed)
            if self.on_message is not None:
                await self.on_message(message)

    async def _time_out(self, action: dict) -> None:
        _, row = await self.controls.row_of(action)
        if row.get("decided_by") != action["id"] and row["status"] != "waiting_result":
            log.info("question %s was %s before its timeout applied; nothing to do", row["id"], row["status"])
            return

        def change(row: dict) -> dict:
            self._must_be_question(row)
            return dict(ask_user.timed_out(row), finished_at=now())
        await self.controls.decide(action, "waiting_result", "time out", change)

    def _must_be_question(self, row: dict) -> None:
        if row["name"] != ask_user.NAME:
            raise ActionError(f"tool call {row['id']} is a {row['name']!r} call, not a question (ask_user)")


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when is not None else None
