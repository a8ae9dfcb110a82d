"""``GET /api/monikers``: the kinds of agent this service can run, with the
config each takes."""
from flask import Blueprint, jsonify

from api import schemas, session_config
from api.context import ctx
from api.openapi import operation

bp = Blueprint("monikers", __name__, url_prefix="/api")


@bp.get("/monikers")
@operation(200, schemas.MonikerList, errors=())
def list_monikers():
    """installed monikers"""
    return jsonify({"monikers": ctx().monikers.describe(),
                    "session_config_schema": session_config.runner_schema()})
