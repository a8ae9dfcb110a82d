"""``GET /api/sessions/<id>/diff?against=<session_id>``: two sessions of one
lineage, step by step.

The comparison itself is evals/diff.py's (the eval scorers use the same one);
this route reads the two records through the store and refuses a pair that is
not one lineage: one must descend from the other through ``replayed_from`` /
``forked_from`` links, or both from one source.  ``against`` is side ``a``
(the base, the recording) and ``<id>`` side ``b`` (the replay or fork); the
state differences say what changes a's state into b's.

Steps are paired by equal iteration (a replay keeps its source's numbers, a
fork continues them) from where both sessions have steps of their own: the
earlier ones are shared history.  At most ``limit`` iterations (2,000) are
compared per answer, ``from_iteration`` pages on; ``summary.truncated`` says
when the answer was cut.
"""
from flask import Blueprint, jsonify
from pydantic import Field

from api.context import ctx
from api.errors import ApiError
from api.openapi import operation
from api.requests import not_found, path_id, query
from api.schemas import Id, Open, Strict
from api.sessions import first_own_iteration, session_view
from evals import diff

bp = Blueprint("diff", __name__, url_prefix="/api")

MAX_DEPTH = 64  # links followed up a lineage
MAX_TOOL_CALLS = 20_000  # rows read per side


class DiffQuery(Strict):
    against: Id = Field(description="the session compared against (side a: the recording, the source)")
    from_iteration: int | None = Field(None, ge=0, le=2**62, description="the first iteration compared (default: "
                                                                          "the first both sessions took themselves)")
    limit: int = Field(1000, ge=1, le=diff.MAX_ITERATIONS, description="iterations compared at most")


class SessionDiff(Open):
    session_id: str
    against: str
    lineage: dict = Field(description="{relation: descends | ancestor | siblings | same, common: session id}")
    from_iteration: int
    a: dict = Field(description="the against session: its name and agent, status, steps, tokens, cost, errors, "
                                "final text")
    b: dict = Field(description="the session: as a")
    iterations: list[dict] = Field(description="{iteration, a, b, differs: [text|tool_calls|status|step], state: "
                                               "[{path, op, before, after}]}; a side is null where it took no step")
    first_divergence: dict | None = Field(description="{iteration, what, detail, a, b}, or null")
    summary: dict


@bp.get("/sessions/<id:session_id>/diff")
@operation(200, SessionDiff, query=DiffQuery, errors=(400, 404))
def session_diff(session_id):
    """two sessions of one lineage (a replay or fork and its source, or two of one source) compared step by step:
    text, state, tool calls, status, tokens and cost per iteration, and the first divergence"""
    session_id = path_id(session_id, "session_id")
    q: DiffQuery = query()
    views = {sid: _view(sid) for sid in (q.against, session_id)}
    lineage = _lineage(views[q.against], views[session_id])
    start = q.from_iteration if q.from_iteration is not None else max(map(first_own_iteration, views.values()))
    a, b = (_record(views[sid], start, q.limit) for sid in (q.against, session_id))
    out = diff.diff_records(a, b, limit=q.limit)
    out["summary"]["truncated"] = out["summary"]["truncated"] or any(len(r["steps"]) > q.limit for r in (a, b))
    return jsonify({"session_id": session_id, "against": q.against, "lineage": lineage, "from_iteration": start,
                    **out})


def _view(session_id: str) -> dict:
    """The session's snapshot (its pending view while its create waits, with
    the links its create's payload names)."""
    view = session_view(session_id)
    if view is None:
        raise not_found("session", session_id)
    if view.get("status") == "pending":
        create = ctx().store.actions.find_create(session_id=session_id) or {}
        payload = create.get("payload") or {}
        fork, replay = payload.get("fork"), payload.get("replay") or payload.get("replayed_from")
        if isinstance(fork, dict):
            view = {**view, "forked_from": {"session_id": fork.get("session_id"), "iteration": fork.get("iteration")}}
        if isinstance(replay, dict):
            view = {**view, "replayed_from": {"session_id": replay.get("session_id"),
                                              "from_iteration": replay.get("from_iteration", 0)}}
    return view


def _source(view: dict) -> str | None:
    """The session this one was replayed or forked from."""
    for key in ("replayed_from", "forked_from"):
        link = view.get(key)
        if isinstance(link, dict) and isinstance(link.get("session_id"), str):
            return link["session_id"]
    return None


def _ancestry(view: dict) -> list[str]:
    """The session and the sources above it, nearest first."""
    chain = [view["session_id"]]
    source = _source(view)
    while source and source not in chain and len(chain) <= MAX_DEPTH:
        chain.append(source)
        above = ctx().store.states.get(source) if _is_id(source) else None
        source = _source(above) if above else None
    return chain


def _is_id(value: str) -> bool:
    try:
        path_id(value, "session_id")
        return True
    except ApiError:
        return False


def _lineage(a: dict, b: dict) -> dict:
    """How b relates to a; 400 when they are not one lineage."""
    up_a, up_b = _ancestry(a), _ancestry(b)
    if a["session_id"] == b["session_id"]:
        return {"relation": "same", "common": a["session_id"]}
    if a["session_id"] in up_b:
        return {"relation": "descends", "common": a["session_id"]}
    if b["session_id"] in up_a:
        return {"relation": "ancestor", "common": b["session_id"]}
    common = next((sid for sid in up_b if sid in up_a), None)
    if common is None:
        raise ApiError(400, "invalid_request", f"sessions {b['session_id']} and {a['session_id']} are not one "
                                               "lineage (neither was replayed or forked from the other or "
                                               "from one source)")
    return {"relation": "siblings", "common": common}


def _record(view: dict, start: int, limit: int) -> dict:
    """The session's steps ``start``..``start + limit`` and their tool calls."""
    store, sid = ctx().store, view["session_id"]
    if view.get("status") == "pending":
        return {"snapshot": view, "steps": [], "tool_calls": []}
    steps = store.steps.search(session_id=sid, min_iteration=start, limit=limit + 1)
    calls = store.tool_calls.of_steps(sid, start, start + limit, limit=MAX_TOOL_CALLS) if steps else []
    return {"snapshot": view, "steps": steps, "tool_calls": calls}
