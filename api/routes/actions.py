"""``/api/actions``: the action queue read back, as the audit log of every
control request and the way to learn how one ended."""
from flask import Blueprint, jsonify

from api import schemas
from api.context import ctx
from api.openapi import operation
from api.requests import not_found, path_id, query

bp = Blueprint("actions", __name__, url_prefix="/api")


@bp.get("/actions")
@operation(200, schemas.ActionList, query=schemas.ActionQuery)
def list_actions():
    """control requests, newest first: the audit log"""
    q: schemas.ActionQuery = query()
    actions = ctx().store.actions.search(session_id=q.session_id, agent_id=q.agent_id, type=q.type,
                                         status=q.status, newest_first=q.order == "newest",
                                         limit=q.limit, offset=q.offset)
    return jsonify({"actions": [shown(a) for a in actions], "limit": q.limit, "offset": q.offset})


@bp.get("/actions/<id:action_id>")
@operation(200, schemas.Action, errors=(400, 404), operation_id="getAction")
def get_action(action_id):
    """an action's status and error"""
    action_id = path_id(action_id, "action_id")
    action = ctx().store.actions.get(action_id)
    if action is None:
        raise not_found("action", action_id)
    return jsonify(shown(action))


# What an action row keeps for retries (api/idempotency.py) is not part of the audit log.
IDEMPOTENCY_COLUMNS = ("idempotency_key", "request_hash", "answer")


def shown(action: dict) -> dict:
    return {k: v for k, v in action.items() if k not in IDEMPOTENCY_COLUMNS}
