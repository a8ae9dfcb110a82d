"""Trees of sub-agents: controls that cascade down a tree, and budgets that
cover a whole tree (the parent/child link itself is runtime/session/child_sessions.py).

- ``cascade``: destroy (unless a child chose ``on_parent_destroy: abandon``),
  ``pause {tree}`` and ``resume {tree}`` are queued for each direct child, each
  of which cascades on when applied; being actions, a cascade cut by a crash
  finishes on restart, and each child's action names the one it came from, so
  one applied again sends no child its control twice.
- ``pause_for_tree_budget``: before each step, a session in a tree checks every
  ancestor's ``budget_tokens`` / ``budget_cost`` against the usage of that
  ancestor's whole subtree plus its own next step (estimated as its last);
  when it would cross one, it pauses (reason ``budget``) and the subtree of the
  ancestor whose budget it is gets paused too.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from domain.statuses import SESSION_FINISHED

if TYPE_CHECKING:
    from runtime.base.persistence import Persistence
    from runtime.session.view import AgentView

log = logging.getLogger("runtime.child_sessions")


async def cascade(persist: Persistence, session_id: str, verb: str, payload: dict, cause: str | None = None) -> int:
    """Queue ``verb`` for each direct child of a session that it applies to
    (each child cascades on to its own children when it is applied).

    ``cause`` is the id of the action being applied: each child's action
    carries it (``payload.cascaded_from``), and a child that has one from the
    same cause already is skipped.  So an action applied again after a crash
    (its cascade cut short, or done but not yet marked) cascades again without
    sending any child the control twice."""
    children = [child for child in await persist.children(session_id) if _applies(child, verb, payload)]
    sent = await persist.cascaded(cause, verb, [c["session_id"] for c in children]) if cause and children else set()
    count = 0
    for child in children:
        if child["session_id"] in sent:
            continue
        await persist.enqueue(verb, agent_id=child["agent_id"], session_id=child["session_id"],
                              payload={**payload, "cascaded_from": cause} if cause else payload)
        count += 1
    if count:
        log.info("session %s: %s queued for %d children", session_id, verb, count)
    return count


def _applies(child: dict, verb: str, payload: dict) -> bool:
    if child["status"] in SESSION_FINISHED:
        return False
    config = child.get("config") if isinstance(child.get("config"), dict) else {}
    if verb == "destroy" and config.get("on_parent_destroy") == "abandon":
        return False
    if verb == "pause" and child["status"] == "paused":
        return False
    if verb == "resume" and (child["status"] != "paused" or (
            payload.get("reason") and child.get("status_reason") != payload["reason"])):
        return False  # e.g. a budget resume leaves children a person paused alone
    return True


def _tokens(usage) -> int:
    usage = usage or {}
    return (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)


def _budget_problem(config: dict, used: dict, next_: dict) -> str | None:
    tokens, cost = config.get("budget_tokens"), config.get("budget_cost")
    if tokens is not None and _tokens(used) + _tokens(next_) > tokens:
        return f"tokens: {_tokens(used)} used by the tree, ~{_tokens(next_)} more would pass its budget of {tokens}"
    if cost is not None and (used.get("cost") or 0) + (next_.get("cost") or 0) > cost:
        return f"cost: {used.get('cost') or 0:.4f} used by the tree, would pass its budget of {cost}"
    return None


async def tree_over_budget(agent: AgentView) -> tuple[str, dict] | None:
    """Whether this session's next step would cross the budget of one of its
    ancestors (or its own, counting its descendants).  Returns the reason and
    the session whose budget it is, or None.  Reads the tree only for sessions
    in a tree or with a budget of their own."""
    root = agent.extra.get("root_session_id")
    own_budget = agent.config.budget_tokens is not None or agent.config.budget_cost is not None
    if not root and not own_budget:
        return None
    rows = {r["session_id"]: r for r in await agent.persist.tree(root or agent.session_id)}
    if len(rows) <= 1 and not root:
        return None  # no children: its own budget check covers it
    rows[agent.session_id] = dict(rows.get(agent.session_id, {}), **agent.snapshot())
    parents = {sid: r.get("parent_session_id") for sid, r in rows.items()}
    chain, sid = [], agent.session_id
    while sid and sid in rows and sid not in chain:
        chain.append(sid)
        sid = parents.get(sid)
    for ancestor in chain:
        config = rows[ancestor].get("config") or {}
        if config.get("budget_tokens") is None and config.get("budget_cost") is None:
            continue
        used = {"input_tokens": 0, "output_tokens": 0, "cost": 0.0}
        for sid_, row in rows.items():
            if _descends(sid_, ancestor, parents):
                usage = row.get("usage") or {}
                used["input_tokens"] += usage.get("input_tokens") or 0
                used["output_tokens"] += usage.get("output_tokens") or 0
                used["cost"] += usage.get("cost") or 0.0
        problem = _budget_problem(config, used, agent.last_step_usage or {})
        if problem:
            return problem, rows[ancestor]
    return None


def _descends(session_id: str, ancestor: str, parents: dict) -> bool:
    seen = set()
    while session_id and session_id not in seen:
        if session_id == ancestor:
            return True
        seen.add(session_id)
        session_id = parents.get(session_id)
    return False


async def pause_for_tree_budget(agent: AgentView) -> bool:
    """Before a step: pause (reason ``budget``) when it would cross a tree's
    budget, and queue a pause of the whole subtree whose budget it is."""
    found = await tree_over_budget(agent)
    if not found:
        return False
    problem, owner = found
    agent.request_pause()
    agent.last_error = f"budget: {problem} (budget of session {owner['session_id']})"
    await agent.set_status("paused", "budget")
    # the whole subtree whose budget it is (for itself: paused already, the action pauses its children)
    await agent.persist.enqueue("pause", agent_id=owner["agent_id"], session_id=owner["session_id"],
                                payload={"tree": True, "reason": "budget"})
    return True
