"""``/api/agents``: creating agents, listing them, and controlling their sessions.

Writes only ever append actions to the queue: the agent service applies them.
A control naming only an agent goes to that agent's latest session, resolved
here so the 202 can name it.
"""
from flask import Blueprint, jsonify
from ulid import ULID

from api import schemas, session_config
from domain.events import session_summary
from api.context import ctx
from api.errors import ApiError
from api.openapi import operation
from api.profile_library import create_payload
from api.requests import IdConverter, body, not_found, path_id, query
from api.sessions import enqueue, latest_session_id, session_view
from domain.session_config import ExceedsParent, within_parent
from store.state import SUMMARY_COLUMNS

bp = Blueprint("agents", __name__, url_prefix="/api")


class AgentIdConverter(IdConverter):
    """An agent id in a path; never ``bulk`` (that path is POST /api/agents/bulk),
    so ``OPTIONS /api/agents/bulk`` allows POST only."""

    regex = r"(?!bulk(?:/|$))[^/]+"
    openapi_schema = {"type": "string", "pattern": "^(?!bulk$)" + IdConverter.openapi_schema["pattern"][1:]}


@bp.record_once
def _converter(state):
    state.app.url_map.converters["agent_id"] = AgentIdConverter

_AGENT = {"agent_id": "$response.body#/agent_id"}
# what a create's answer leads to (schemathesis follows these in its stateful phase)
CREATE_LINKS = {"GetAgent": ("getAgent", _AGENT), "GetSessions": ("listSessions", _AGENT),
                "GetSession": ("getSession", {"session_id": "$response.body#/session_id"}),
                "GetAction": ("getAction", {"action_id": "$response.body#/action_id"}),
                "Pause": ("pauseAgent", _AGENT), "Resume": ("resumeAgent", _AGENT),
                "Destroy": ("destroyAgent", _AGENT), "Interrupt": ("interruptAgent", _AGENT)}


@bp.post("/agents")
@operation(202, schemas.Accepted, body=schemas.CreateAgentRequest, body_required=True, errors=(400, 404, 409),
           also={200: (schemas.Accepted, "the session exists already")}, links=CREATE_LINKS, idempotent=True)
def create_agent():
    """create an agent session (idempotent by session_id), from a moniker or a profile"""
    req: schemas.CreateAgentRequest = body()
    if req.profile is not None:
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
    if parent is not None:  # a child never has more than its parent (as a spawned one: tools/spawn_agent.py)
        try:
            config = within_parent(parent.get("config") or {}, config)
        except ExceedsParent as exc:
            raise ApiError(400, "exceeds_parent", str(exc)) from None
    with ctx().create_lock:
        existing = session_view(req.session_id) if req.session_id else None
        if existing:
            return repeated_create(req, existing)
        return new_create(req, moniker, config, parent)


def new_create(req: schemas.CreateAgentRequest, moniker: str, config: dict, parent: dict | None):
    agent_id = req.agent_id or str(ULID())
    session_id = req.session_id or str(ULID())
    payload = {"moniker": moniker, "task": req.task, "config": config, "conversation_id": req.conversation_id}
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
@operation(200, schemas.AgentList, query=schemas.AgentQuery)
def list_agents():
    """agents with their latest session, summarised (no config, state or guidance; a field too big named in
    ``omitted``: GET /api/sessions/{session_id} has it all): filtered, sorted, one page, and the total"""
    q: schemas.AgentQuery = query()
    found = ctx().store.states.agents(status=q.status, moniker=q.moniker, text=q.q, sort=q.sort,
                                      limit=q.limit, offset=q.offset)
    found["agents"] = with_parent_names([session_summary(row) for row in found["agents"]])
    return jsonify({**found, "limit": q.limit, "offset": q.offset})


def with_parent_names(rows: list[dict]) -> list[dict]:
    """A sub-agent's row carries its parent's name (``parent_name``), so a list
    names the parent even when the parent's own row is on another page: one
    query for the page's parents, not one read per row in the browser."""
    parents = [r["parent_session_id"] for r in rows if r.get("parent_session_id")]
    names = ctx().store.states.get_many(parents, columns=("session_id", "name")) if parents else {}
    for row in rows:
        if row.get("parent_session_id"):
            row["parent_name"] = (names.get(row["parent_session_id"]) or {}).get("name")
    return rows


@bp.get("/agents/<agent_id:agent_id>")
@operation(200, schemas.Snapshot, errors=(400, 404), operation_id="getAgent")
def get_agent(agent_id):
    """the agent's latest session"""
    agent_id = path_id(agent_id, "agent_id")
    session_id = latest_session_id(agent_id)
    if session_id is None:
        raise not_found("agent", agent_id)
    return jsonify(session_view(session_id))


@bp.get("/agents/<id:agent_id>/sessions")
@operation(200, schemas.SessionList, query=schemas.Page, errors=(400, 404), operation_id="listSessions")
def list_sessions(agent_id):
    """the agent's sessions, summarised as GET /api/agents summarises them"""
    agent_id = path_id(agent_id, "agent_id")
    page: schemas.Page = query()
    if latest_session_id(agent_id) is None:
        raise not_found("agent", agent_id)
    sessions = ctx().store.states.sessions_for_agent(agent_id, limit=page.limit, offset=page.offset,
                                                     columns=SUMMARY_COLUMNS)
    return jsonify({"sessions": [session_summary(row) for row in sessions], "limit": page.limit,
                    "offset": page.offset})


def control(agent_id: str, type_: str, payload_of=lambda req: {}):
    """Queue a control for the session the body names (default: the agent's latest)."""
    agent_id = path_id(agent_id, "agent_id")
    req = body()
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


def _control(body_model, operation_id: str):
    return operation(202, schemas.Accepted, body=body_model, errors=(400, 404, 409), operation_id=operation_id,
                     idempotent=True)


@bp.post("/agents/<id:agent_id>/pause")
@_control(schemas.TreeControlRequest, "pauseAgent")
def pause_agent(agent_id):
    """pause (tree: its sub-agents too) the agent's session (default: its latest;
    409: the agent has no such session)"""
    return control(agent_id, "pause", lambda req: {"tree": True} if req.tree else {})


@bp.post("/agents/<id:agent_id>/resume")
@_control(schemas.ResumeRequest, "resumeAgent")
def resume_agent(agent_id):
    """resume (optionally raising its budget; tree: its sub-agents too) the agent's
    session (default: its latest; 409: the agent has no such session)"""
    return control(agent_id, "resume",
                   lambda req: {**req.model_dump(include={"budget_tokens", "budget_cost"}, exclude_none=True),
                                **({"tree": True} if req.tree else {})})


@bp.post("/agents/<id:agent_id>/destroy")
@_control(schemas.ControlRequest, "destroyAgent")
def destroy_agent(agent_id):
    """destroy the agent's session (default: its latest; 409: the agent has no such session)"""
    return control(agent_id, "destroy")


@bp.post("/agents/<id:agent_id>/interrupt")
@_control(schemas.InterruptRequest, "interruptAgent")
def interrupt_agent(agent_id):
    """send guidance to the agent's session (tree: to its unfinished sub-agents too; default: its
    latest; 409: the agent has no such session)"""
    return control(agent_id, "interrupt",
                   lambda req: {"guidance": req.guidance, **({"tree": True} if req.tree else {})})
