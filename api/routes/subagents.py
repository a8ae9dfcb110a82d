"""``GET /api/sessions/<id>/children``: a session's sub-agents.

Children are sessions whose snapshot names the session as its parent
(``spawn_agent``, tools/spawn_agent.py).  ``descendants=true`` lists the whole
subtree below the session instead (each row with its ``parent_session_id`` and
``depth``), which is what the dashboard's tree view draws.  Each row is a
compact snapshot: ids, name, moniker, status, iteration, the latest result
text, last error and usage.
"""
from typing import Literal

from flask import Blueprint, jsonify
from pydantic import Field

from api.context import ctx
from api.openapi import operation
from api.requests import not_found, path_id, query
from api.schemas import Open, Strict
from api.sessions import session_view

bp = Blueprint("subagents", __name__, url_prefix="/api")

ROW_KEYS = ("session_id", "agent_id", "parent_session_id", "parent_agent_id", "root_session_id", "name", "moniker",
            "task", "status", "status_reason", "iteration", "generation", "last_error", "usage", "created_at",
            "updated_at")
MAX_TASK = 300
MAX_TEXT = 500


class ChildrenQuery(Strict):
    descendants: Literal["true", "false"] = Field("false", description="true: the whole subtree below the session, "
                                                                      "not only its children")


class ChildRow(Open):
    session_id: str
    agent_id: str
    parent_session_id: str | None = None
    status: str
    depth: int = Field(description="1 for a child, 2 for a grandchild…")
    name: str | None = None
    moniker: str | None = None
    iteration: int | None = None
    result_text: str | None = None


class ParentRef(Open):
    agent_id: str | None = None
    session_id: str


class ChildrenList(Open):
    session_id: str
    parent: ParentRef | None = None
    root_session_id: str | None = None
    children: list[ChildRow]
    total: int


def compact(snapshot: dict, depth: int) -> dict:
    row = {k: snapshot.get(k) for k in ROW_KEYS}
    if isinstance(row["task"], str) and len(row["task"]) > MAX_TASK:
        row["task"] = row["task"][:MAX_TASK] + "…"
    result = snapshot.get("result") if isinstance(snapshot.get("result"), dict) else {}
    text = result.get("text")
    row["result_text"] = text[:MAX_TEXT] if isinstance(text, str) else None
    row["depth"] = depth
    return row


def subtree(session: dict, store) -> list[dict]:
    """Every session below ``session``, parents before their children (then oldest first)."""
    root = session.get("root_session_id") or session["session_id"]
    rows = [r for r in store.states.tree(root) if r["session_id"] != session["session_id"]]
    by_parent: dict[str, list[dict]] = {}
    for row in rows:
        by_parent.setdefault(row.get("parent_session_id"), []).append(row)
    out, stack = [], [(session["session_id"], 0)]
    seen = {session["session_id"]}
    while stack:
        parent, depth = stack.pop(0)
        for child in by_parent.get(parent, []):
            if child["session_id"] in seen:
                continue
            seen.add(child["session_id"])
            out.append(compact(child, depth + 1))
            stack.append((child["session_id"], depth + 1))
    return out


@bp.get("/sessions/<id:session_id>/children")
@operation(200, ChildrenList, query=ChildrenQuery, errors=(400, 404))
def list_children(session_id):
    """a session's sub-agents (descendants=true: its whole subtree), each a compact snapshot with its depth; and
    the session's own parent"""
    session_id = path_id(session_id, "session_id")
    q: ChildrenQuery = query()
    session = session_view(session_id)
    if session is None:
        raise not_found("session", session_id)
    store = ctx().store
    if q.descendants == "true" and session.get("status") != "pending":
        rows = subtree(session, store)
    else:
        rows = [compact(c, 1) for c in store.states.children(session_id)]
    parent = ({"agent_id": session.get("parent_agent_id"), "session_id": session["parent_session_id"]}
              if session.get("parent_session_id") else None)
    return jsonify({"session_id": session_id, "parent": parent, "root_session_id": session.get("root_session_id"),
                    "children": rows, "total": len(rows)})
