"""Reading a request: its path ids, query string and JSON body, each checked
against what the route declares (api/openapi.py ``operation``), and refused
with the API's error body (api/errors.py) when it does not fit.

A route reads its query and body with :func:`query` and :func:`body`, which
take the models from the route's own declaration: the models that validate
a request are the ones the OpenAPI document shows, by construction.  A route
reads them when it is ready to, so a path it cannot find still answers 404
before its body is looked at.
"""
import json

from flask import current_app, request
from pydantic import BaseModel
from werkzeug.routing import BaseConverter

from api.errors import ApiError
from store.filters import ID_PATTERN, check_id


class IdConverter(BaseConverter):
    """``<id:name>`` in a route: a path segment holding an id.  It matches what
    the default converter matches (any segment), so a malformed id reaches the
    route and is refused there with a 400 (:func:`path_id`), not a 404; the
    document states the id's pattern."""

    regex = "[^/]+"
    openapi_schema = {"type": "string", "pattern": ID_PATTERN.pattern}


def declared(part: str) -> type[BaseModel]:
    """The model the current route declares for ``part`` ("query" or "body")."""
    view = current_app.view_functions[request.endpoint]
    model = getattr(getattr(view, "declaration", None), part, None)
    if model is None:
        raise LookupError(f"{request.endpoint} declares no {part} model")
    return model


MAX_DEPTH = 32  # nesting of a body's arrays and objects; configs and states are a few levels deep


def body() -> BaseModel:
    """The JSON body as the route's body model.  No body at all is ``{}``, so a
    model whose fields are all optional takes an empty POST.  (A body that is
    not ``application/json`` never gets here: api/guard.py answers 415.)"""
    model = declared("body")
    raw = request.get_data()
    data = parse_json(raw) if raw else {}
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", "request body must be a JSON object")
    return model.model_validate(data)


def parse_json(raw: bytes):
    """The body's JSON, or a 400: not JSON, or nested deeper than ``MAX_DEPTH``
    (which would otherwise exhaust the interpreter's recursion in the parser,
    the validation or the store's encoder: a 500)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise ApiError(400, "invalid_json", f"request body is not valid JSON (or nests deeper than {MAX_DEPTH})") \
            from None
    if depth_exceeds(data, MAX_DEPTH):
        raise ApiError(400, "too_deep", f"request body nests arrays and objects deeper than {MAX_DEPTH} levels")
    return data


def depth_exceeds(value, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep (iterative: no recursion to exhaust)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def query() -> BaseModel:
    """The query string as the route's query model (a repeated key: its first value)."""
    return declared("query").model_validate(request.args.to_dict())


def path_id(value: str, what: str) -> str:
    try:
        return check_id(value, what)
    except ValueError:
        raise ApiError(400, "invalid_id", f"{what} is not a valid id") from None


def not_found(what: str, value: str) -> ApiError:
    return ApiError(404, "not_found", f"no {what} {value}")
