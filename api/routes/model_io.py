"""``GET /api/sessions/<id>/steps/<iteration>/model-io``: what the model saw in a step.

For a step of a session that calls a model (``baml``), the request as it was
sent (its messages, the output schema or grammar, the options; never the
headers), the reply as received, and how the prompt's tokens split between
its parts, one entry per model call of the step (a step that re-asked made
several).  They are kept only for each session's last steps (agents.py
``--keep-model-io``, 20 by default), never for a private session (config
``private``), with secrets redacted (store/model_io.py,
runtime/record/model_io.py); ``why`` says why a step has none.
"""
from typing import Any

from flask import Blueprint, jsonify
from pydantic import Field

from api.context import ctx
from api.errors import ApiError
from api.openapi import operation
from api.requests import not_found, path_id
from api.schemas import Open
from api.sessions import session_view

bp = Blueprint("model_io", __name__, url_prefix="/api")

MAX_ITERATION = 2**62  # as every iteration the API takes (a store filter holds an int64)


class ModelCall(Open):
    ask: int = Field(description="0, then 1, 2... when the step asked the model again")
    function: str | None = None
    model: str | None = None
    mode: str | None = Field(None, description="structured output: json_schema, grammar or off")
    request: Any = Field(None, description="the request body as sent: messages, output schema, options")
    reply: str | None = Field(None, description="the reply's text as received")
    tokens: Any = Field(None, description="{parts: {system, task, history, tools, state, inputs} (estimated), "
                                          "input_tokens, output_tokens, estimated}")
    created_at: str


class ModelIO(Open):
    session_id: str
    iteration: int
    calls: list[ModelCall]
    why: str | None = Field(None, description="when there are no calls: why none were kept")
    kept_from: int | None = Field(None, description="the first iteration the session still keeps calls of")


@bp.get("/sessions/<id:session_id>/steps/<int:iteration>/model-io")
@operation(200, ModelIO, errors=(400, 404))
def step_model_io(session_id, iteration):
    """what the model was sent and answered in one step (kept for a session's last steps)"""
    session_id = path_id(session_id, "session_id")
    if iteration > MAX_ITERATION:
        raise ApiError(400, "invalid_request", f"iteration must be at most {MAX_ITERATION}")
    view = session_view(session_id)
    if view is None:
        raise not_found("session", session_id)
    store = ctx().store
    calls = store.model_io.of_step(session_id, iteration)
    kept = store.model_io.kept_range(session_id)
    answer = {"session_id": session_id, "iteration": iteration, "calls": calls, "why": None,
              "kept_from": kept[0] if kept else None}
    if not calls:
        answer["why"] = _why_none(view, iteration, kept)
    return jsonify(answer)


def _why_none(view: dict, iteration: int, kept: tuple[int, int] | None) -> str:
    if (view.get("config") or {}).get("private"):
        return "the session is private: what its model saw is not kept"
    if kept and iteration < kept[0]:
        return f"only a session's last steps are kept; this one's are from step {kept[0] + 1} on"
    return "nothing was kept for this step: it called no model, or the service keeps none " \
           "(agents.py --keep-model-io)"
