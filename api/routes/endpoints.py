"""``GET /api/endpoints``: the model endpoints a session's ``config.llm.endpoint``
may name, with the models each serves (monikers/endpoints.py).  Names and
models only: an endpoint's URL and the variable holding its key are the
operator's business, not a caller's.  A llama.cpp endpoint whose model has no
chat template of its own carries ``chat_template_warning`` (monikers/chat_template.py)."""
from flask import Blueprint, jsonify

from api import schemas
from api.openapi import operation
from monikers import chat_template, endpoints

bp = Blueprint("endpoints", __name__, url_prefix="/api")


@bp.get("/endpoints")
@operation(200, schemas.EndpointList, errors=())
def list_endpoints():
    """the operator's model endpoints: their names and the models each serves"""
    catalog = endpoints.catalog()
    found, listed = catalog.endpoints(), []
    for entry in catalog.public():
        warning = chat_template.warnings().of(entry["name"], found[entry["name"]])
        listed.append({**entry, "chat_template_warning": warning} if warning else entry)
    return jsonify({"endpoints": listed})
