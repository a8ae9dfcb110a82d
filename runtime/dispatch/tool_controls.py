"""Approve, deny and post results: the handlers of the actions that decide a
tool call (``tool_approve``, ``tool_deny``, ``tool_result``).  The tool phase
they hand a decided row to is runtime/session/tool_runner.py."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from domain.errors import ActionError
from runtime.session.tool_runner import ToolRunner, capped_result, now
from tools import args_check

if TYPE_CHECKING:
    from runtime.session.agent import SessionAgent
    from runtime.session.live_sessions import SessionRegistry

log = logging.getLogger("runtime.tools")


async def record_decision(runner: ToolRunner, agent, row: dict, decided_by: str, change: dict) -> dict:
    """The one way a decision reaches a tool call, whoever made it (an approval,
    a denial, a posted result, an answer, a child's outcome ending a waiting
    ``spawn_agent``): the row, changed and marked ``decided_by`` the action (or
    outcome key) that decided it, is written durably, then handed to the
    session's open phase.  Applied again after a crash, the caller finds its
    own id in ``decided_by`` and stops before this."""
    row = dict(row, decided_by=decided_by, **change)
    await runner.write([row])
    if agent.tool_phase is not None:
        agent.tool_phase.deliver(row)
    return row


class ToolControls:
    """Approve, deny and post results: handlers of the ``tool_approve``,
    ``tool_deny`` and ``tool_result`` actions.

    Each checks the call's current status and refuses (the action ends
    ``failed`` with a ``conflict`` message) when it does not accept the
    request, so of two approvals racing through the queue the second fails
    cleanly.  The row is written first, then handed to the session's phase.
    The action id is kept on the row (``decided_by``): an action applied
    again after a crash finds its own decision there and changes nothing.
    """

    def __init__(self, sessions: SessionRegistry, runner: ToolRunner):
        self.sessions = sessions
        self.runner = runner

    async def row_of(self, action: dict) -> tuple[SessionAgent | None, dict]:
        """The live session (None when not running here) and the current row of
        the call the action names; ActionError when the session has no such call."""
        tool_call_id = action["payload"].get("tool_call_id")
        if not isinstance(tool_call_id, str):
            raise ActionError("payload names no tool_call_id")
        agent = self.sessions.get(action["session_id"])
        row = agent.tool_phase.row(tool_call_id) if agent and agent.tool_phase else None
        if row is None:
            row = await self.runner.persist.get_tool_call(tool_call_id)
        if row is None or row["session_id"] != action["session_id"]:
            raise ActionError(f"unknown tool call {tool_call_id} in session {action['session_id']}")
        return agent, row

    async def took_effect(self, action: dict) -> bool:
        """Whether the action decided its call already: the row names it in ``decided_by``."""
        try:
            _, row = await self.row_of(action)
        except ActionError:
            return False
        return row.get("decided_by") == action["id"]

    async def decide(self, action: dict, expected: str, verb: str, change: Callable[[dict], dict]) -> None:
        """Write ``change(row)`` to a call in status ``expected``, marked as decided
        by this action, then hand the row to the session's phase."""
        agent, row = await self.row_of(action)
        if row.get("decided_by") == action["id"]:
            return  # applied already (this action again, after a crash)
        if row["status"] != expected:
            raise ActionError(f"conflict: cannot {verb} tool call {row['id']}: it is {row['status']}")
        if agent is None or agent.finished:
            status = agent.status if agent else "not running here"
            raise ActionError(f"cannot {verb} tool call {row['id']}: its session is {status}")
        row = await record_decision(self.runner, agent, row, action["id"], change(row))
        log.info("tool call %s %s -> %s action=%s session=%s%s", row["id"], verb, row["status"], action["id"],
                 row["session_id"], " (args edited)" if row.get("original_args") is not None else "")

    async def approve(self, action: dict, payload: dict) -> None:
        """Approve a call, as the model asked it or with ``args`` a person edited
        (checked against the tool here too: the API cannot check an MCP tool's);
        the model's args are kept as ``original_args``."""
        edited = payload.get("args")

        def change(row):
            tool = self.runner.registry.get(row["name"]) if row["name"] in self.runner.registry else None
            decided = {"status": "waiting_result" if tool is not None and tool.external else "pending"}
            if edited is not None and edited != row["args"]:
                problem = args_check.args_problem(tool, edited) if tool is not None else None
                if problem:
                    raise ActionError(f"cannot approve tool call {row['id']} with these args: {problem}")
                decided.update(args=edited, original_args=row["args"])
            return decided
        await self.decide(action, "waiting_approval", "approve", change)

    async def deny(self, action: dict, payload: dict) -> None:
        reason = payload.get("reason")
        text = "denied by a human" + (f": {reason}" if isinstance(reason, str) and reason else "")
        await self.decide(action, "waiting_approval", "deny",
                           lambda row: {"status": "denied", "error": text[:4000], "finished_at": now()})

    async def result(self, action: dict, payload: dict) -> None:
        error = payload.get("error")
        if error is not None:
            change = {"status": "failed", "error": str(error)[:4000]}
        else:
            change = {"status": "success", "result": capped_result(payload.get("result"))}
        await self.decide(action, "waiting_result", "post the result of",
                           lambda row: dict(change, finished_at=now()))
