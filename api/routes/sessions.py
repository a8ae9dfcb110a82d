"""``GET /api/sessions/<id>``: one session, applied or still pending.

What else hangs off a session has its own module: its turns (turns.py), its
sub-agents (subagents.py), forking it (fork.py) and answering its question
(questions.py).
"""
from flask import Blueprint, jsonify

from api import schemas
from api.openapi import operation
from api.requests import not_found, path_id
from api.sessions import session_view

bp = Blueprint("sessions", __name__, url_prefix="/api")


@bp.get("/sessions/<id:session_id>")
@operation(200, schemas.Snapshot, errors=(400, 404), operation_id="getSession")
def get_session(session_id):
    """one session's snapshot"""
    session_id = path_id(session_id, "session_id")
    view = session_view(session_id)
    if view is None:
        raise not_found("session", session_id)
    return jsonify(view)
