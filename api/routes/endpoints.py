"""``GET /api/endpoints``: the model endpoints a session's ``config.llm.endpoint``
may name, with the models each serves (monikers/endpoints.py).  Names and
models only: an endpoint's URL and the variable holding its key are the
operator's business, not a caller's."""
from flask import Blueprint, jsonify

from api import schemas
from api.openapi import operation
from monikers import endpoints

bp = Blueprint("endpoints", __name__, url_prefix="/api")


@bp.get("/endpoints")
@operation(200, schemas.EndpointList, errors=())
def list_endpoints():
    """the operator's model endpoints: their names and the models each serves"""
    return jsonify({"endpoints": endpoints.catalog().public()})
