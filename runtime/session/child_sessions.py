"""Sub-agents: a child session's outcome reaches its parent exactly once.

A child is an ordinary session created through the queue (``spawn_agent``,
tools/spawn_agent.py) whose snapshot names its parent (``parent_agent_id``,
``parent_session_id``), its tree (``root_session_id``) and a small link
(``subagent``: depth, the spawning tool call when the parent waits on it).

**Generations.**  Each activation of a child is a *generation*: 1 at create,
+1 whenever it runs again after finishing (a follow-up through
``message_agent``, a parent woken by its own children, a resume after an
error).  Each generation's outcome (done / error / stopped) is reported once.

**Reporting, durably.**  When a child's snapshot is saved with a final status,
:func:`report_if_finished` first enqueues a ``child_result`` action for the
parent and only then lets the snapshot (with ``reported_generation`` moved on)
be written.  So a crash can leave an action whose snapshot never recorded it
(the report is enqueued again on recovery: a duplicate), never a finished
snapshot whose report is missing.  Paths that write a final snapshot without
going through a session's ``save`` (a moniker gone at restart) are caught by
:func:`report_unreported`, a scan run at every start and adoption round.

**Applying, exactly once.**  The ``child_result`` handler (``ChildControls`` in
runtime/dispatch/child_controls.py) puts the outcome into the parent's inbox as a ``child_result`` item whose id is
``child:<session>:<generation>``: ``add_inbox_item`` refuses an id already
queued or used, so the same action applied twice after a crash, or a duplicate
report, changes nothing.  A parent that is stepping gets it at its next step, a
paused one after resume, a ``done`` one is *woken* (back to ``running``), one
that failed keeps it for its resume.  A ``done`` parent wakes itself when
results came in while its last step ran (:func:`wake_for_children`); a crash
between its end and that wake is caught by :func:`wake_left_done` at the next
start or adoption round, which queues a ``wake`` for its lane.  When the parent waits on the child
(``spawn_agent {wait: true}``), the first generation's outcome ends that tool
call instead, with the child's result.

Trees (destroy / pause / resume cascades, budgets over a whole tree) are in
runtime/session/session_tree.py.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable

from domain.statuses import SESSION_FINISHED
from runtime.base import inbox as inbox_kinds
from runtime.base.persistence import Persistence

if TYPE_CHECKING:
    from runtime.session.view import AgentView, LiveSessions

log = logging.getLogger("runtime.child_sessions")

LINK_KEYS = ("parent_agent_id", "parent_session_id", "root_session_id", "generation", "reported_generation",
             "subagent")
MAX_RESULT_TEXT = 20_000
MAX_RESULT_DATA = 64 * 1024


def item_key(session_id: str, generation: int) -> str:
    return f"child:{session_id}:{generation}"


def generation_of(snapshot: dict) -> int:
    return int(snapshot.get("generation") or 1)


# ---- the child's create ------------------------------------------------------

MAX_FIRST_ITEM_TEXT = 100_000


def create_fields(payload: dict) -> dict:
    """The snapshot fields of a sub-agent, from its create action's payload
    (``parent_agent_id``, ``parent_session_id``, ``subagent``, ``inbox``); a
    plain create has none of them and gets none."""
    parent = payload.get("parent_session_id")
    if not isinstance(parent, str) or not isinstance(payload.get("parent_agent_id"), str):
        return {}
    link = payload.get("subagent") if isinstance(payload.get("subagent"), dict) else {}
    first = []
    for item in payload.get("inbox") or []:
        if isinstance(item, dict) and isinstance(item.get("action_id"), str) and isinstance(item.get("text"), str):
            first.append({"action_id": item["action_id"], "kind": str(item.get("kind") or "system"),
                          "text": item["text"][:MAX_FIRST_ITEM_TEXT], "data": item.get("data"),
                          "source": item.get("source") if isinstance(item.get("source"), dict) else None})
    return {"parent_agent_id": payload["parent_agent_id"], "parent_session_id": parent,
            "root_session_id": link.get("root_session_id") or parent, "generation": 1, "reported_generation": 0,
            "subagent": link, "pending_guidance": first}


async def parent_destroyed(persist: Persistence, sessions: LiveSessions, link: dict) -> bool:
    """A child whose create is applied after its parent was destroyed (the
    cascade could not see it yet) starts stopped, unless it chose ``abandon``."""
    if not link or (link.get("subagent") or {}).get("on_parent_destroy") == "abandon":
        return False
    parent = sessions.get(link["parent_session_id"])
    snapshot = parent.snapshot() if parent is not None else await persist.load_snapshot(link["parent_session_id"])
    return snapshot is not None and snapshot["status"] in ("stopping", "stopped")


# ---- the child's side: report its outcome ----------------------------------

def outcome(snapshot: dict) -> dict:
    """The ``child_result`` payload of a finished child's snapshot."""
    generation = generation_of(snapshot)
    link = snapshot.get("subagent") if isinstance(snapshot.get("subagent"), dict) else {}
    result = snapshot.get("result") if isinstance(snapshot.get("result"), dict) else {}
    text = result.get("text")
    data = result.get("data")
    if data is not None and len(json.dumps(data, default=str)) > MAX_RESULT_DATA:
        data = {"truncated": True, "note": f"the child's data is over {MAX_RESULT_DATA} bytes; "
                                           f"read it from session {snapshot['session_id']}"}
    wait_call = link.get("wait_call") if generation == int(link.get("wait_generation") or 1) else None
    return {
        "key": item_key(snapshot["session_id"], generation), "generation": generation,
        "child_agent_id": snapshot["agent_id"], "child_session_id": snapshot["session_id"],
        "name": snapshot.get("name"), "status": snapshot["status"], "status_reason": snapshot.get("status_reason"),
        "text": text[:MAX_RESULT_TEXT] if isinstance(text, str) else text, "data": data,
        "last_error": snapshot.get("last_error"), "usage": snapshot.get("usage"),
        "iteration": snapshot.get("iteration"), "wait_call": wait_call,
        "finished_at": datetime.now(timezone.utc).isoformat(),
    }


def report_due(snapshot: dict) -> bool:
    return (bool(snapshot.get("parent_session_id")) and snapshot.get("status") in SESSION_FINISHED
            and int(snapshot.get("reported_generation") or 0) < generation_of(snapshot))


async def report(persist: Persistence, snapshot: dict) -> dict:
    """Enqueue the outcome for the parent; returns the payload."""
    payload = outcome(snapshot)
    await persist.enqueue("child_result", agent_id=snapshot["parent_agent_id"],
                          session_id=snapshot["parent_session_id"], payload=payload)
    log.info("session %s generation %d %s: outcome queued for parent %s", snapshot["session_id"],
             payload["generation"], payload["status"], snapshot["parent_session_id"])
    return payload


async def report_if_finished(agent: AgentView) -> None:
    """Called by ``SessionAgent.save`` before it writes a snapshot: a finished
    child's outcome is queued (durable) before the final snapshot is."""
    snapshot = agent.snapshot()
    if report_due(snapshot):
        await report(agent.persist, snapshot)
        agent.extra["reported_generation"] = generation_of(snapshot)


async def report_unreported(persist: Persistence, live: Callable[[str], AgentView | None]) -> int:
    """The recovery scan: finished children whose outcome never got queued (and
    that no runner of this process holds) are reported now."""
    found = 0
    for row in await persist.unreported_outcomes():
        if live(row["session_id"]) is not None:
            continue  # a live session reports through its own save
        await report(persist, row)
        await persist.save_snapshot(dict(row, reported_generation=generation_of(row)))
        found += 1
    if found:
        log.warning("reported %d sub-agent outcomes that a crash had left unreported", found)
    return found


async def wake_left_done(persist: Persistence, live: Callable[[str], AgentView | None],
                         others_alive: set[str]) -> int:
    """The recovery scan's other half.  A session that finished ``done`` while
    children's results came in is woken by its runner right after its end is
    saved (:func:`wake_for_children`); a crash in between leaves it done with
    the results unread.  For each such session that no runner of this process
    holds and no other live worker owns, a ``wake`` action is queued: it is
    applied in the session's lane (runtime/dispatch/child_controls.py), so it cannot race
    a ``child_result`` that wakes the same session (waking it here directly did:
    two runners, one iteration written twice).  Returns how many were queued."""
    found = 0
    for row in await persist.done_with_child_results():
        if live(row["session_id"]) is not None or row.get("owner") in others_alive:
            continue
        if wakeable(row["status"], row.get("status_reason")) and has_child_results(row):
            await persist.enqueue("wake", agent_id=row["agent_id"], session_id=row["session_id"],
                                  payload={"reason": "child_results"})
            found += 1
    if found:
        log.warning("queued a wake for %d sessions that a crash had left done with children's results unread", found)
    return found


def has_child_results(snapshot: dict) -> bool:
    return any(inbox_kinds.kind_of(g) == "child_result" for g in snapshot.get("pending_guidance") or [])


def next_generation(agent: AgentView) -> None:
    """A finished session runs again: its next outcome is a new generation."""
    if agent.extra.get("parent_session_id"):
        agent.extra["generation"] = max(int(agent.extra.get("generation") or 1),
                                        int(agent.extra.get("reported_generation") or 0)) + 1


def bump_snapshot_generation(snapshot: dict) -> dict:
    """The same, for a snapshot about to become a session again (resume after error)."""
    if snapshot.get("parent_session_id") and snapshot.get("status") in SESSION_FINISHED:
        snapshot = dict(snapshot, generation=max(generation_of(snapshot),
                                                 int(snapshot.get("reported_generation") or 0)) + 1)
    return snapshot


# ---- the parent's side: an inbox item, a woken parent, an ended tool call ---

def item_text(payload: dict) -> str:
    who = payload.get("name") or payload["child_session_id"]
    status = payload["status"]
    if status == "done":
        return f"Sub-agent {who} finished: {payload.get('text') or '(no text)'}"
    if status == "error":
        return f"Sub-agent {who} failed: {payload.get('last_error') or 'unknown error'}"
    return f"Sub-agent {who} was stopped ({payload.get('status_reason') or 'stopped'})" + (
        f": {payload['last_error']}" if payload.get("last_error") else "")


def item_data(payload: dict) -> dict:
    return {k: payload.get(k) for k in ("child_agent_id", "child_session_id", "name", "generation", "status",
                                        "status_reason", "text", "data", "last_error", "usage", "iteration")}


def wakeable(status: str, reason: str | None) -> bool:
    """A parent that finished on its own (the moniker said done) is woken by a
    child's result; one stopped by a limit would only finish again."""
    return status == "done" and reason not in ("max_steps", "max_runtime")


def pending_child_results(agent: AgentView) -> bool:
    return has_child_results({"pending_guidance": agent.pending_guidance})


async def wake_for_children(agent: AgentView) -> bool:
    """The runner, after its loop ended: children's results arrived while its
    last step ran, so instead of staying done it runs again (woken)."""
    if agent.stop_requested or not wakeable(agent.status, agent.status_reason) or not pending_child_results(agent):
        return False
    next_generation(agent)
    await agent.set_status("running", "woken")
    return True
