"""``GET /api/openapi.json``: the API's OpenAPI document (api/openapi.py builds
it from the routes' declarations), with a create variant per profile usable
as the profiles are loaded now.  ``/api/docs`` draws it (dashboard.py)."""
from flask import Blueprint, current_app, jsonify

from api import openapi
from api.context import ctx
from api.profile_library import library

bp = Blueprint("document", __name__, url_prefix="/api")


@bp.get("/openapi.json")
def openapi_document():
    return jsonify(openapi.document(current_app, ctx().monikers, library()))
