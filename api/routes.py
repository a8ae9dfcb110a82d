"""The /api routes.

Writes only ever append actions to the queue: the agent service applies them.
Reads come straight from the store.  A control naming only an agent goes to
that agent's latest session, resolved here so the 202 can name it.
"""
import threading
from datetime import datetime, timezone

from flask import Blueprint, current_app, jsonify, request
from pydantic import BaseModel
from ulid import ULID

from api import schemas, session_config
from api.errors import ApiError
from api.storage_health import StorageHealth
from store.filters import check_id

bp = Blueprint("api", __name__, url_prefix="/api")


class ApiContext:
    """What the routes need, stored in ``app.extensions["agentsvc"]``."""

    def __init__(self, store, monikers, metrics, storage_health=None):
        self.store = store
        self.monikers = monikers
        self.metrics = metrics
        self.storage_health = storage_health or StorageHealth(store)
        # Two identical creates racing inside this process must not both enqueue.
        self.create_lock = threading.Lock()


def ctx() -> ApiContext:
    return current_app.extensions["agentsvc"]


def body(model: type[BaseModel]) -> BaseModel:
    if not request.get_data():
        data = {}
    else:
        data = request.get_json(force=True, silent=True)
        if data is None:
            raise ApiError(400, "invalid_json", "request body is not valid JSON")
    if not isinstance(data, dict):
        raise ApiError(400, "invalid_request", "request body must be a JSON object")
    return model.model_validate(data)


def args(model: type[BaseModel]) -> BaseModel:
    return model.model_validate(request.args.to_dict())


def path_id(value: str, what: str) -> str:
    try:
        return check_id(value, what)
    except ValueError:
        raise ApiError(400, "invalid_id", f"{what} is not a valid id") from None


def not_found(what: str, value: str):
    return ApiError(404, "not_found", f"no {what} {value}")


def pending_snapshot(create: dict) -> dict:
    """What a session looks like between its create being accepted and applied."""
    payload = create.get("payload") or {}
    return {
        "agent_id": create["agent_id"], "session_id": create["session_id"], "moniker": payload.get("moniker"),
        "name": payload.get("name"),
        "task": payload.get("task"), "config": payload.get("config"), "status": "pending", "iteration": -1,
        "conversation_id": create.get("conversation_id"), "created_at": create["created_at"],
        "updated_at": create["created_at"], "action_id": create["id"], "action_status": create["status"],
        "last_error": create.get("error"),
        "parent_agent_id": payload.get("parent_agent_id"), "parent_session_id": payload.get("parent_session_id"),
    }


def session_view(session_id: str) -> dict | None:
    store = ctx().store
    snapshot = store.states.get(session_id)
    if snapshot:
        return snapshot
    create = store.actions.find_create(session_id=session_id)
    return pending_snapshot(create) if create else None


def latest_session_id(agent_id: str) -> str | None:
    """The agent's newest session: an applied one, or a create still in the queue."""
    store = ctx().store
    snapshot = store.states.latest_for_agent(agent_id)
    create = store.actions.latest_create_for_agent(agent_id)
    if create and (snapshot is None or create["created_at"] > snapshot["created_at"]):
        return create["session_id"]
    return snapshot["session_id"] if snapshot else None


def enqueue(type_: str, agent_id: str, session_id: str, payload: dict, status: int = 202, **extra):
    action = ctx().store.actions.enqueue(type_, agent_id=agent_id, session_id=session_id, payload=payload, **extra)
    ctx().metrics.actions_enqueued.labels(type_).inc()
    return jsonify({"agent_id": agent_id, "session_id": session_id, "action_id": action["id"],
                    "status": action["status"]}), status


# ---- agents ---------------------------------------------------------------

@bp.post("/agents")
def create_agent():
    req: schemas.CreateAgentRequest = body(schemas.CreateAgentRequest)
    if req.profile is not None:  # api/profiles.py: the profile's moniker and resolved config
        from api.profiles import create_payload

        moniker, config = create_payload(req)
    else:
        if req.moniker not in ctx().monikers:
            raise ApiError(400, "unknown_moniker", f"no moniker {req.moniker!r}; installed: {ctx().monikers.names()}")
        moniker, config = req.moniker, session_config.check(req.config, ctx().monikers.get(req.moniker))
    if req.conversation_id and ctx().store.conversations.get(req.conversation_id) is None:
        raise not_found("conversation", req.conversation_id)
    parent = ctx().store.states.get(req.parent_session_id) if req.parent_session_id else None
    if req.parent_session_id and parent is None:
        raise not_found("parent session", req.parent_session_id)
    with ctx().create_lock:
        existing = session_view(req.session_id) if req.session_id else None
        if existing:
            return repeated_create(req, existing)
        agent_id = req.agent_id or str(ULID())
        session_id = req.session_id or str(ULID())
        payload = {"moniker": moniker, "task": req.task, "config": config,
                   "conversation_id": req.conversation_id}
        if req.name:
            payload["name"] = req.name
        if parent is not None:  # a child session (its questions also reach the root's conversation)
            payload.update(parent_agent_id=parent["agent_id"], parent_session_id=parent["session_id"])
        accepted = enqueue("create", agent_id, session_id, payload, conversation_id=req.conversation_id)
        if req.conversation_id:  # a participant from now on, so messages posted before it starts reach it
            ctx().store.conversations.join(req.conversation_id, kind="agent", agent_id=agent_id, session_id=session_id)
        return accepted


def repeated_create(req: schemas.CreateAgentRequest, existing: dict):
    """A create naming a session that exists changes nothing and answers 200 with
    the original ids; naming it under another agent is a conflict."""
    if req.agent_id and existing["agent_id"] != req.agent_id:
        raise ApiError(409, "conflict", f"session {req.session_id} belongs to another agent")
    create = ctx().store.actions.find_create(session_id=req.session_id)
    return jsonify({"agent_id": existing["agent_id"], "session_id": req.session_id,
                    "action_id": create["id"] if create else None,
                    "status": create["status"] if create else existing["status"], "existing": True}), 200


@bp.get("/agents")
def list_agents():
    q: schemas.AgentQuery = args(schemas.AgentQuery)
    found = ctx().store.states.agents(status=q.status, moniker=q.moniker, text=q.q, sort=q.sort,
                                      limit=q.limit, offset=q.offset)
    return jsonify({**found, "limit": q.limit, "offset": q.offset})


@bp.get("/agents/<agent_id>")
def get_agent(agent_id):
    agent_id = path_id(agent_id, "agent_id")
    session_id = latest_session_id(agent_id)
    if session_id is None:
        raise not_found("agent", agent_id)
    return jsonify(session_view(session_id))


@bp.get("/agents/<agent_id>/sessions")
def list_sessions(agent_id):
    agent_id = path_id(agent_id, "agent_id")
    page: schemas.Page = args(schemas.Page)
    if latest_session_id(agent_id) is None:
        raise not_found("agent", agent_id)
    sessions = ctx().store.states.sessions_for_agent(agent_id, limit=page.limit, offset=page.offset)
    return jsonify({"sessions": sessions, "limit": page.limit, "offset": page.offset})


def control(agent_id: str, type_: str, model=schemas.ControlRequest, payload_of=lambda req: {}):
    agent_id = path_id(agent_id, "agent_id")
    req = body(model)
    if req.session_id:
        view = session_view(req.session_id)
        if view is None or view["agent_id"] != agent_id:
            if latest_session_id(agent_id) is None:
                raise not_found("agent", agent_id)
            # 409, not 404: the agent (the path) exists; the session named in the body is not one of its.
            raise ApiError(409, "unknown_session", f"agent {agent_id} has no session {req.session_id}")
        session_id = req.session_id
    else:
        session_id = latest_session_id(agent_id)
        if session_id is None:
            raise not_found("agent", agent_id)
    return enqueue(type_, agent_id, session_id, payload_of(req))


@bp.post("/agents/<agent_id>/pause")
def pause_agent(agent_id):
    return control(agent_id, "pause", schemas.TreeControlRequest, lambda req: {"tree": True} if req.tree else {})


@bp.post("/agents/<agent_id>/resume")
def resume_agent(agent_id):
    return control(agent_id, "resume", schemas.ResumeRequest,
                   lambda req: {**req.model_dump(include={"budget_tokens", "budget_cost"}, exclude_none=True),
                                **({"tree": True} if req.tree else {})})


@bp.post("/agents/<agent_id>/destroy")
def destroy_agent(agent_id):
    return control(agent_id, "destroy")


@bp.post("/agents/<agent_id>/interrupt")
def interrupt_agent(agent_id):
    return control(agent_id, "interrupt", schemas.InterruptRequest, lambda req: {"guidance": req.guidance})


# ---- sessions, steps, actions ---------------------------------------------

@bp.get("/sessions/<session_id>")
def get_session(session_id):
    session_id = path_id(session_id, "session_id")
    view = session_view(session_id)
    if view is None:
        raise not_found("session", session_id)
    return jsonify(view)


@bp.get("/agent-steps")
def list_steps():
    q: schemas.StepQuery = args(schemas.StepQuery)
    store = ctx().store
    last_iteration = None
    if q.order == "desc" and q.session_id:
        snapshot = store.states.get(q.session_id)
        if snapshot is None:
            raise not_found("session", q.session_id)
        last_iteration = snapshot["iteration"]
    steps = store.steps.search(
        session_id=q.session_id, agent_id=q.agent_id, min_iteration=q.min_iteration,
        max_iteration=q.max_iteration, since=q.since, status=q.status, limit=q.limit, offset=q.offset,
        newest_first=q.order == "desc", last_iteration=last_iteration)
    return jsonify({"steps": steps, "limit": q.limit, "offset": q.offset})


@bp.get("/actions")
def list_actions():
    q: schemas.ActionQuery = args(schemas.ActionQuery)
    actions = ctx().store.actions.search(session_id=q.session_id, agent_id=q.agent_id, type=q.type,
                                         status=q.status, newest_first=q.order == "newest",
                                         limit=q.limit, offset=q.offset)
    return jsonify({"actions": actions, "limit": q.limit, "offset": q.offset})


@bp.get("/actions/<action_id>")
def get_action(action_id):
    action_id = path_id(action_id, "action_id")
    action = ctx().store.actions.get(action_id)
    if action is None:
        raise not_found("action", action_id)
    return jsonify(action)


# ---- service --------------------------------------------------------------

@bp.get("/monikers")
def list_monikers():
    return jsonify({"monikers": ctx().monikers.describe(),
                    "session_config_schema": session_config.runner_schema()})


@bp.get("/health")
def health():
    store = ctx().store
    try:
        pending = store.actions.count("pending")
        oldest = store.actions.oldest_pending()
    except Exception as exc:
        current_app.logger.error("health check failed: %s", exc)
        return jsonify({"status": "error", "message": "database unreachable"}), 503
    age = None
    if oldest:
        created = datetime.fromisoformat(oldest["created_at"].replace("Z", "+00:00"))
        age = round((datetime.now(timezone.utc) - created).total_seconds(), 3)
    # "ok" even when storage is behind: the service still answers; "storage" says how its tables are.
    return jsonify({"status": "ok", "pending_actions": pending, "oldest_pending_age_s": age,
                    "storage": ctx().storage_health.report()})
