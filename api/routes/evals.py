"""Eval sets and runs (issue 29): replay a frozen set of sessions under changed
settings and score each replay against its recording.

- ``POST /api/evalsets`` freezes a named list of sessions, given by id or by a
  search (the parameters of ``GET /api/search``: the sessions of its hits, in
  rank order); ``GET /api/evalsets[/<id>]`` reads them back.
- ``POST /api/evalsets/<id>/runs`` accepts a run: the overrides are validated
  here, once, and each session's replay create payload is built here
  (api/replays.py ``replay_payload``) with a pre-assigned replay session id,
  then stored with the run.  The agents service drives it from there
  (runtime/record/eval_runner.py): it only enqueues those payloads, at most
  ``concurrency`` unfinished at once, and scores each finished pair.
- ``GET /api/evalsets/<id>/runs`` compares the set's runs (summary per scorer,
  a per-session table, the sessions that got better or worse from one run to
  the next); ``GET /api/evalruns/<id>`` is one run with every session's scores.
- ``GET /api/scorers``: the scorers a run may name (evals/scorers.py).
"""
from typing import Literal

from flask import Blueprint, jsonify
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from ulid import ULID

from api import eval_views
from api.context import ctx
from api.errors import ApiError, describe
from api.openapi import operation
from api.replays import ReplayRequest, capped_changes, changes_of, check_range, replay_payload
from api.requests import body, not_found, path_id, query
from api.routes.search import SearchRequest, run_search
from api.schemas import Id, Name, Open, Strict
from domain.session_config import SessionConfig
from evals.judge import JudgeSpec
from evals.scorers import default_registry

bp = Blueprint("evals", __name__, url_prefix="/api")

MAX_SET_SESSIONS = 500
REPLAY_FIELDS = ReplayRequest.model_fields
# The scorers this app knows (built-ins and plugins, loaded once): the document lists them, and
# app.py and agents.py are given the same AGENTSVC_PLUGINS.  Another name is a 400.
ScorerName = Literal[tuple(default_registry().names())]


class EvalSetRequest(Strict):
    """Exactly one of ``session_ids`` and ``search``; the document says so with oneOf."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"oneOf": [
        {"properties": {"session_ids": {"type": "array"}}, "required": ["session_ids"]},
        {"properties": {"search": {"type": "object"}}, "required": ["search"]},
    ]})

    name: Name
    session_ids: list[Id] | None = Field(None, min_length=1, max_length=MAX_SET_SESSIONS,
                                         json_schema_extra={"uniqueItems": True},
                                         description="the sessions, in order (or give search)")
    search: SearchRequest | None = Field(None, description="the parameters of GET /api/search: the set is the "
                                                           "sessions of its hits, in rank order, frozen now")
    from_iteration: int = Field(0, ge=0, le=2**62, description="the step each replay starts from")

    @model_validator(mode="after")
    def _one_source(self) -> "EvalSetRequest":
        if (self.session_ids is None) == (self.search is None):
            raise ValueError("give exactly one of session_ids or search")
        if self.session_ids is not None and len(set(self.session_ids)) != len(self.session_ids):
            raise ValueError("session_ids must not repeat")
        return self


class RunRequest(Strict):
    # at most one of profile and moniker (as a replay's), said in the document too
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": {"required": ["profile", "moniker"]}})

    config: SessionConfig | None = Field(None, description="keys that change each session's config")
    profile: str | None = Field(None, min_length=1, max_length=64, description="replay under this profile")
    moniker: str | None = Field(None, min_length=1, max_length=128, description="replay with this moniker")
    # the replay's own choices, as api/replays.py offers them
    tools: REPLAY_FIELDS["tools"].annotation = Field("recorded", description=REPLAY_FIELDS["tools"].description)
    children: REPLAY_FIELDS["children"].annotation = Field("served",
                                                           description=REPLAY_FIELDS["children"].description)
    to_iteration: int | None = Field(None, ge=0, le=2**62, description="stop each replay after this step")
    scorers: list[ScorerName] = Field(min_length=1, max_length=32, json_schema_extra={"uniqueItems": True},
                                      description="names from GET /api/scorers")
    concurrency: int = Field(4, ge=1, le=64, description="replays unfinished at once")
    judge: JudgeSpec | None = Field(None, description="llm_judge settings (evals/judge.py)")

    @field_validator("config")
    @classmethod
    def _config_size(cls, value):
        return capped_changes(value)

    @field_validator("scorers")
    @classmethod
    def _unique(cls, value):
        if len(set(value)) != len(value):
            raise ValueError("scorers must not repeat")
        return value


class SetListQuery(Strict):
    limit: int = Field(100, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=1_000_000)


class EvalSet(Open):
    id: str
    name: str
    session_ids: list[str]
    from_iteration: int
    search: dict | None = None
    created_at: str


class EvalSetList(Open):
    evalsets: list[EvalSet]


class EvalRun(Open):
    id: str
    evalset_id: str
    status: str = Field(description="running | done | failed")
    scorers: list[str]
    progress: dict = Field(description="sessions per status: pending, enqueued, scored, failed")
    summary: dict = Field(description="{scorer: {mean, median, n, passed, failed}}")


class EvalRunDetail(EvalRun):
    results: list[dict] = Field(description="per session: its replay, status and {scorer: {value, passed, detail}}")


class EvalRunList(Open):
    evalset: EvalSet
    runs: list[EvalRun]
    sessions: list[dict] = Field(description="per session: {session_id, name, runs: {run_id: {replay_session_id, "
                                             "status, scores: {scorer: value}}}}")
    comparisons: list[dict] = Field(description="per run after the first: {from_run, to_run, better, worse, "
                                                "changes: {session_id: {scorer: better|worse}}}")


class ScorerList(Open):
    scorers: list[dict]


# ---- sets ---------------------------------------------------------------------

@bp.post("/evalsets")
@operation(201, EvalSet, body=EvalSetRequest, errors=(400, 404))
def create_evalset():
    """freeze a named set of sessions (by id, or the sessions a search finds) to replay and score"""
    req: EvalSetRequest = body()
    store = ctx().store
    if req.search is not None:
        hits = run_search(req.search, store)["hits"]
        wanted = list(dict.fromkeys(h["session_id"] for h in hits if h.get("session_id")))
    else:
        wanted = req.session_ids
    known = store.states.get_many(wanted, columns=("session_id",))
    if req.search is not None:
        session_ids = [sid for sid in wanted if sid in known][:MAX_SET_SESSIONS]
        if not session_ids:
            raise ApiError(404, "not_found", "the search found no recorded session")
    else:
        missing = [sid for sid in wanted if sid not in known]
        if missing:
            raise ApiError(404, "not_found", f"no recorded session {', '.join(missing[:5])}")
        session_ids = wanted
    search = req.search.model_dump(mode="json", exclude_none=True) if req.search else None
    evalset = store.evals.create_set(name=req.name, session_ids=session_ids, from_iteration=req.from_iteration,
                                     search=search)
    return jsonify(evalset), 201


@bp.get("/evalsets")
@operation(200, EvalSetList, query=SetListQuery)
def list_evalsets():
    """eval sets, newest first"""
    q: SetListQuery = query()
    return jsonify({"evalsets": ctx().store.evals.list_sets(limit=q.limit, offset=q.offset)})


@bp.get("/evalsets/<id:evalset_id>")
@operation(200, EvalSet, errors=(400, 404))
def get_evalset(evalset_id):
    """one eval set"""
    return jsonify(_evalset(evalset_id))


def _evalset(evalset_id: str) -> dict:
    evalset = ctx().store.evals.get_set(path_id(evalset_id, "evalset_id"))
    if evalset is None:
        raise not_found("eval set", evalset_id)
    return evalset


# ---- runs ---------------------------------------------------------------------

@bp.post("/evalsets/<id:evalset_id>/runs")
@operation(202, EvalRun, body=RunRequest, errors=(400, 404, 409, 422), role="admin")
def create_run(evalset_id):
    """replay every session of the set under these overrides and score each replay (the agents service runs it)"""
    evalset = _evalset(evalset_id)
    req: RunRequest = body()
    check_range(evalset["from_iteration"], req.to_iteration)  # the set's start against the run's end: 422
    results = [_planned(sid, evalset, req) for sid in evalset["session_ids"]]
    # The config as asked (the keys it changes), not filled with every default:
    # the runs are told apart by it ({"n": 2}, not '{"approve":[],"interval_s":1,…').
    request = {**req.model_dump(mode="json", exclude_none=True, exclude={"config"}),
               **({"config": changes_of(req.config)} if req.config is not None else {})}
    run = ctx().store.evals.create_run(evalset_id=evalset["id"], request=request, results=results)
    return jsonify(eval_views.run_view(run, ctx().store.evals.results_of(run["id"]), {})), 202


def _planned(source_session_id: str, evalset: dict, req: RunRequest) -> dict:
    """One session's replay: its create payload under the run's overrides, with its
    own session id.  A bad override is the request's fault (400); a source that
    is gone or cannot be replayed fails that session only."""
    replay_id = str(ULID())
    planned = {"source_session_id": source_session_id, "replay_session_id": replay_id}
    source = ctx().store.states.get(source_session_id)
    if source is None:
        return {**planned, "status": "failed", "error": f"no recorded session {source_session_id}"}
    fields = {"from_iteration": evalset["from_iteration"], "to_iteration": req.to_iteration, "config": req.config,
              "profile": req.profile, "moniker": req.moniker, "tools": req.tools, "children": req.children,
              "session_id": replay_id}
    try:
        replay = ReplayRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise ApiError(400, "invalid_request", describe(exc)) from None
    try:
        payload = replay_payload(source, replay)
    except ApiError as exc:
        if exc.status == 400:
            raise
        return {**planned, "status": "failed", "error": exc.message}
    return {**planned, "agent_id": source["agent_id"], "payload": payload}


@bp.get("/evalsets/<id:evalset_id>/runs")
@operation(200, EvalRunList, errors=(400, 404))
def list_runs(evalset_id):
    """the set's runs side by side: summary per scorer, a per-session table, who got better or worse"""
    evalset = _evalset(evalset_id)
    store = ctx().store
    runs = store.evals.runs_of_set(evalset["id"])
    results = {run["id"]: store.evals.results_of(run["id"]) for run in runs}
    scores = eval_views.scores_by_run(store.evals.scores_of([run["id"] for run in runs]))
    names = store.states.get_many(evalset["session_ids"], columns=("session_id", "name"))
    return jsonify({
        "evalset": evalset,
        "runs": [eval_views.run_view(run, results[run["id"]], scores.get(run["id"], {})) for run in runs],
        "sessions": eval_views.session_table(evalset["session_ids"], {s: r.get("name") for s, r in names.items()},
                                             results, scores),
        "comparisons": eval_views.comparisons(runs, scores, default_registry()),
    })


@bp.get("/evalruns/<id:run_id>")
@operation(200, EvalRunDetail, errors=(400, 404))
def get_run(run_id):
    """one eval run with every session's replay and scores"""
    store = ctx().store
    run = store.evals.get_run(path_id(run_id, "run_id"))
    if run is None:
        raise not_found("eval run", run_id)
    results = store.evals.results_of(run["id"])
    scores = eval_views.scores_by_run(store.evals.scores_of([run["id"]])).get(run["id"], {})
    view = eval_views.run_view(run, results, scores)
    view["results"] = [eval_views.result_view(r, scores.get(r["source_session_id"], {})) for r in results]
    return jsonify(view)


@bp.get("/scorers")
@operation(200, ScorerList)
def list_scorers():
    """the scorers an eval run may name: built-ins and plugins"""
    return jsonify({"scorers": default_registry().describe()})
