"""``GET /api/agent-steps``: the steps agents took, filtered and paged."""
from flask import Blueprint, jsonify

from api import schemas
from api.context import ctx
from api.openapi import operation
from api.requests import query

bp = Blueprint("steps", __name__, url_prefix="/api")


@bp.get("/agent-steps")
@operation(200, schemas.StepList, query=schemas.StepQuery, errors=(400,))
def list_steps():
    """step history, ordered by iteration"""
    q: schemas.StepQuery = query()
    store = ctx().store
    if q.only or q.attempt_outcome:  # a timeline filter: its matches, paged (store/step_filters.py)
        steps, matched = store.steps.matching(
            only=q.only, attempt_outcome=q.attempt_outcome, session_id=q.session_id, agent_id=q.agent_id,
            min_iteration=q.min_iteration, max_iteration=q.max_iteration, since=q.since, status=q.status,
            limit=q.limit, offset=q.offset, newest_first=q.order == "desc")
        return jsonify({"steps": steps, "limit": q.limit, "offset": q.offset, "matched": matched})
    last_iteration = None
    if q.order == "desc" and q.session_id:
        # a session just created has no state row until its queue item runs:
        # no steps yet, as in ascending order (not a 404 the dashboard would log)
        snapshot = store.states.get(q.session_id)
        if snapshot is None:
            return jsonify({"steps": [], "limit": q.limit, "offset": q.offset})
        last_iteration = snapshot["iteration"]  # the steps past it are found by the store
    steps = store.steps.search(
        session_id=q.session_id, agent_id=q.agent_id, min_iteration=q.min_iteration,
        max_iteration=q.max_iteration, since=q.since, status=q.status, limit=q.limit, offset=q.offset,
        newest_first=q.order == "desc", last_iteration=last_iteration)
    return jsonify({"steps": steps, "limit": q.limit, "offset": q.offset})
