"""Sessions as the routes see them, and how a route changes one: by appending
an action to the queue, which the agent service applies (app.py never runs a
session itself).

A session exists for the API from the moment its create is accepted: until
the service applies the create, it is shown as ``pending``, built from the
queued action.
"""
from flask import jsonify, request

from api import auth, idempotency
from api.context import ctx
from api.errors import ApiError
from domain import trace_context


def pending_snapshot(create: dict) -> dict:
    """What a session looks like between its create being accepted and applied."""
    payload = create.get("payload") or {}
    return {
        "agent_id": create["agent_id"], "session_id": create["session_id"], "moniker": payload.get("moniker"),
        "name": payload.get("name"),
        "task": payload.get("task"), "config": payload.get("config"), "status": "pending", "iteration": -1,
        "conversation_id": create.get("conversation_id"), "created_at": create["created_at"],
        "updated_at": create["created_at"], "action_id": create["id"], "action_status": create["status"],
        "last_error": create.get("error"),
        "parent_agent_id": payload.get("parent_agent_id"), "parent_session_id": payload.get("parent_session_id"),
    }


def session_view(session_id: str) -> dict | None:
    """The session's snapshot, or its pending view while its create is queued."""
    store = ctx().store
    snapshot = store.states.get(session_id)
    if snapshot:
        return snapshot
    create = store.actions.find_create(session_id=session_id)
    return pending_snapshot(create) if create else None


def first_own_iteration(view: dict) -> int:
    """The first iteration the session took itself: a replay's or fork's record
    starts there (the steps before are its source's)."""
    replayed, forked = view.get("replayed_from"), view.get("forked_from")
    if isinstance(replayed, dict):
        return int(replayed.get("from_iteration") or 0)
    if isinstance(forked, dict) and isinstance(forked.get("iteration"), int):
        return forked["iteration"] + 1
    return 0


def latest_session_id(agent_id: str) -> str | None:
    """The agent's newest session: an applied one, or a create still in the queue."""
    store = ctx().store
    snapshot = store.states.latest_for_agent(agent_id)
    create = store.actions.latest_create_for_agent(agent_id)
    if create and (snapshot is None or create["created_at"] > snapshot["created_at"]):
        return create["session_id"]
    return snapshot["session_id"] if snapshot else None


def enqueue(type_: str, agent_id: str, session_id: str, payload: dict, status: int = 202, **extra):
    """Append an action for the session and answer with its ids (202: accepted, not yet applied)."""
    def answer(rows):
        return {"agent_id": agent_id, "session_id": session_id, "action_id": rows[0]["id"],
                "status": rows[0]["status"]}, status
    body, status, _ = queue(type_, [(agent_id, session_id)], payload, answer, **extra)
    return jsonify(body), status


def queue(type_: str, targets, payload: dict, answer, payloads: list[dict] | None = None,
          **extra) -> tuple[dict, int, list[dict]]:
    """Append one action per ``(agent_id, session_id)`` of ``targets`` in one
    commit, recorded as asked by this request's token (api/auth.py); returns
    ``answer(rows)`` (a body and a status) and the rows.  Every action carries
    ``payload``, or its own of ``payloads`` (one per target: a bulk decision
    names a different tool call in each).  Under an Idempotency-Key the key and
    that answer commit with the rows (api/idempotency.py).  A valid W3C
    ``traceparent`` header is kept in each payload (domain/trace_context.py)."""
    actions = ctx().store.actions
    rows = actions.new_rows(type_, targets, payload, actor=auth.actor(), **extra)
    if payloads is not None:
        assert len(payloads) == len(rows)
        for row, own in zip(rows, payloads):
            row["payload"] = own
    traced = trace_context.checked(request.headers.get(trace_context.HEADER))
    if traced:
        for row in rows:
            row["payload"] = {**row["payload"], trace_context.PAYLOAD_KEY: traced}
    body, status = answer(rows)
    idempotency.stamp(rows, body, status)
    if rows:
        actions.append(rows)
        ctx().metrics.actions_enqueued.labels(type_).inc(len(rows))
    return body, status, rows


def started_session(session_id: str, verb: str) -> dict:
    """The snapshot of a session another is made from (a fork, a replay): a 404
    when there is none, a 409 while its create is still queued."""
    source = ctx().store.states.get(session_id)
    if source is None:
        if session_view(session_id) is not None:
            raise ApiError(409, "conflict", f"session {session_id} has not started yet; nothing to {verb}")
        raise ApiError(404, "not_found", f"no session {session_id}")
    return source


def repeated_session(session_id: str | None, agent_id: str):
    """The 200 answer to a fork or replay naming a session that exists (nothing
    is made again), a 409 when it is another agent's, or None when it is new."""
    existing = session_view(session_id) if session_id else None
    if existing is None:
        return None
    if existing.get("agent_id") != agent_id:
        raise ApiError(409, "conflict", f"session {session_id} belongs to another agent")
    create = ctx().store.actions.find_create(session_id=session_id)
    return jsonify({"agent_id": existing["agent_id"], "session_id": session_id,
                    "action_id": create["id"] if create else None, "existing": True,
                    "status": create["status"] if create else existing["status"]}), 200
