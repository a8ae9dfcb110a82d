"""The OpenAPI 3.1 document of the API, built from the pydantic models that
also validate the requests, so the two cannot drift apart."""
import copy
import re

from pydantic import BaseModel

from api import profiles as profiles_api
from api import questions, schemas, tools
from api import fork as fork_api
from api import search as search_api
from api import turns as turns_api
from api import subagents as subagents_api

REF = "#/components/schemas/{model}"


def _ref(model: type[BaseModel]) -> dict:
    return {"$ref": REF.format(model=model.__name__)}


def _json(model) -> dict:
    return {"content": {"application/json": {"schema": _ref(model)}}}


def _errors(*codes) -> dict:
    return {str(c): {"description": "error", **_json(schemas.Error)} for c in codes}


def _query(model: type[BaseModel]) -> list[dict]:
    """Query parameters from a model; those the model requires are required here too."""
    schema = model.model_json_schema(ref_template=REF)
    required = set(schema.get("required", ()))
    return [{"name": name, "in": "query", "required": name in required, "schema": prop}
            for name, prop in schema["properties"].items()]


def _path(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "pattern": schemas.ID_PATTERN.pattern}}


def _op(summary, ok, *, ok_model, body=None, params=(), errors=(400,), body_required=None) -> dict:
    """One operation.  A body is required when its model has a required field
    (an empty body is then a 400), unless ``body_required`` says otherwise."""
    op = {"summary": summary, "parameters": list(params),
          "responses": {str(ok): {"description": "ok", **_json(ok_model)}, **_errors(*errors)}}
    if body is not None:
        required = body_required if body_required is not None else any(
            f.is_required() for f in body.model_fields.values())
        op["requestBody"] = {"required": required, **_json(body)}
    return op


def _control(verb: str, model=schemas.ControlRequest) -> dict:
    return {"post": _op(f"{verb} the agent's session (default: its latest; 409: the agent has no such session)",
                        202, ok_model=schemas.Accepted, body=model, params=[_path("agent_id")],
                        errors=(400, 404, 409))}


def _links_from_create() -> dict:
    """What a create answers leads to (schemathesis follows these in its stateful phase)."""
    agent = {"agent_id": "$response.body#/agent_id"}
    links = {"GetAgent": ("getAgent", agent), "GetSessions": ("listSessions", agent),
             "GetSession": ("getSession", {"session_id": "$response.body#/session_id"}),
             "GetAction": ("getAction", {"action_id": "$response.body#/action_id"}),
             "Pause": ("pauseAgent", agent), "Resume": ("resumeAgent", agent), "Destroy": ("destroyAgent", agent),
             "Interrupt": ("interruptAgent", agent)}
    return {name: {"operationId": op, "parameters": params} for name, (op, params) in links.items()}


CONVERSATION_MODELS = [schemas.CreateConversationRequest, schemas.JoinRequest, schemas.PostMessageRequest,
                       schemas.Conversation, schemas.ConversationList, schemas.Participant, schemas.ParticipantList,
                       schemas.Message, schemas.MessageList, schemas.Delivery, schemas.Posted]


def _conversation_paths() -> dict:
    cid = _path("conversation_id")
    return {
        "/api/conversations": {
            "post": _op("create a conversation (idempotent by conversation_id: 200 with the existing one)", 201,
                        ok_model=schemas.Conversation, body=schemas.CreateConversationRequest),
            "get": _op("conversations, newest first", 200, ok_model=schemas.ConversationList,
                       params=_query(schemas.Page)),
        },
        "/api/conversations/{conversation_id}": {
            "get": _op("one conversation", 200, ok_model=schemas.Conversation, params=[cid], errors=(400, 404))},
        "/api/conversations/{conversation_id}/participants": {
            "post": _op("join a user, or an agent session, to the conversation (409: the session named does "
                        "not exist)", 201, ok_model=schemas.Participant,
                        body=schemas.JoinRequest, params=[cid], errors=(400, 404, 409)),
            "get": _op("the conversation's participants", 200, ok_model=schemas.ParticipantList,
                       params=[cid, *_query(schemas.Page)], errors=(400, 404)),
        },
        "/api/conversations/{conversation_id}/messages": {
            "post": _op("a user posts; every participant agent session receives it as guidance for its next step",
                        201, ok_model=schemas.Posted, body=schemas.PostMessageRequest, params=[cid],
                        errors=(400, 404)),
            "get": _op("the transcript in (created_at, message_id) order, after a cursor", 200,
                       ok_model=schemas.MessageList, params=[cid, *_query(schemas.MessageQuery)], errors=(400, 404)),
        },
    }


OPERATION_IDS = {("get", "/api/agents/{agent_id}"): "getAgent",
                 ("get", "/api/agents/{agent_id}/sessions"): "listSessions",
                 ("get", "/api/sessions/{session_id}"): "getSession", ("get", "/api/actions/{action_id}"): "getAction",
                 ("post", "/api/agents/{agent_id}/pause"): "pauseAgent",
                 ("post", "/api/agents/{agent_id}/resume"): "resumeAgent",
                 ("post", "/api/agents/{agent_id}/destroy"): "destroyAgent",
                 ("post", "/api/agents/{agent_id}/interrupt"): "interruptAgent"}


def _operation_id(method: str, path: str) -> str:
    words = [w.strip("{}").replace("-", "_") for w in path.removeprefix("/api/").split("/")]
    return method + "_" + "_".join(words)


def _create_variants(components: dict, monikers) -> None:
    """A create's body, one shape per installed moniker (oneOf on ``moniker``):
    its ``config`` takes the runner's keys plus the moniker's own, and nothing
    else, exactly as api/session_config.py checks it.  A moniker with no
    ``config_model`` takes any further keys."""
    base = components["CreateAgentRequest"]
    runner = components["SessionConfig"]
    variants, mapping = [], {}
    for name in monikers.names():
        model = monikers.get(name).config_model
        variant = copy.deepcopy(base)
        variant["title"] = f"CreateAgentRequest ({name})"
        variant["properties"]["moniker"] = {"type": "string", "const": name}
        variant["properties"].pop("profile", None)  # a profile's create is its own variant (api/profiles.py)
        variant["required"] = sorted({*variant.get("required", []), "moniker"})
        if model is not None:
            own = model.model_json_schema(ref_template=REF)
            components.update(own.pop("$defs", {}))
            variant["properties"]["config"] = {
                "type": "object", "additionalProperties": False,
                "properties": {**runner["properties"], **own.get("properties", {})}}
        key = "CreateAgentRequest_" + re.sub(r"[^A-Za-z0-9._-]", "_", name)
        components[key] = variant
        variants.append({"$ref": REF.format(model=key)})
        mapping[name] = REF.format(model=key)
    components["CreateAgentRequest"] = {"oneOf": variants,
                                        "discriminator": {"propertyName": "moniker", "mapping": mapping}}


def build(monikers=None) -> dict:
    """The document.  ``monikers``: the registry of installed monikers, whose
    names and config models shape a create's body (any other name is a 400)."""
    models = [schemas.CreateAgentRequest, schemas.ControlRequest, schemas.TreeControlRequest, schemas.ResumeRequest, schemas.InterruptRequest,
              schemas.Accepted, schemas.ActionList,
              schemas.Action, schemas.Snapshot, schemas.Step, schemas.AgentList, schemas.SessionList,
              schemas.StepList, schemas.MonikerInfo, schemas.MonikerList, schemas.Health, schemas.Error,
              *CONVERSATION_MODELS, *tools.MODELS, *questions.MODELS, *profiles_api.MODELS]
    record_models, record_paths = search_api.openapi_paths(_op, _query)
    fork_models, fork_paths = fork_api.openapi_paths(_op, _path)
    turn_models, turn_paths = turns_api.openapi_paths(_op, _path, _query)
    subagent_models, subagent_paths = subagents_api.openapi_paths(_op, _path, _query)
    models += record_models + fork_models + turn_models + subagent_models
    components = {}
    for model in models:
        schema = model.model_json_schema(ref_template=REF)
        components.update(schema.pop("$defs", {}))
        components[model.__name__] = schema
    if monikers is not None and monikers.names():
        _create_variants(components, monikers)
    paths = {
        "/api/agents": {
            "post": {**_op("create an agent session (idempotent by session_id), from a moniker or a profile", 202,
                           ok_model=schemas.Accepted, body=schemas.CreateAgentRequest, errors=(400, 404, 409),
                           body_required=True),
                     },
            "get": _op("agents with their latest session: filtered, sorted, one page, and the total",
                       200, ok_model=schemas.AgentList, params=_query(schemas.AgentQuery)),
        },
        "/api/agents/{agent_id}": {"get": _op("the agent's latest session", 200, ok_model=schemas.Snapshot,
                                              params=[_path("agent_id")], errors=(400, 404))},
        "/api/agents/{agent_id}/sessions": {"get": _op("the agent's sessions", 200, ok_model=schemas.SessionList,
                                                       params=[_path("agent_id"), *_query(schemas.Page)],
                                                       errors=(400, 404))},
        "/api/agents/{agent_id}/pause": _control("pause (tree: its sub-agents too)", schemas.TreeControlRequest),
        "/api/agents/{agent_id}/resume": _control("resume (optionally raising its budget; tree: its sub-agents too)",
                                                  schemas.ResumeRequest),
        "/api/agents/{agent_id}/destroy": _control("destroy"),
        "/api/agents/{agent_id}/interrupt": _control("send guidance to", schemas.InterruptRequest),
        "/api/sessions/{session_id}": {"get": _op("one session's snapshot", 200, ok_model=schemas.Snapshot,
                                                  params=[_path("session_id")], errors=(400, 404))},
        "/api/agent-steps": {"get": _op("step history, ordered by iteration", 200, ok_model=schemas.StepList,
                                        params=_query(schemas.StepQuery), errors=(400, 404))},
        "/api/actions": {"get": _op("control requests, newest first: the audit log", 200,
                                    ok_model=schemas.ActionList, params=_query(schemas.ActionQuery))},
        "/api/actions/{action_id}": {"get": _op("an action's status and error", 200, ok_model=schemas.Action,
                                                params=[_path("action_id")], errors=(400, 404))},
        "/api/monikers": {"get": _op("installed monikers", 200, ok_model=schemas.MonikerList, errors=())},
        "/api/tools": {"get": _op("tools agents can call (built-ins, plugins, MCP servers' tools), "
                                  "with the JSON schema of their args", 200, ok_model=tools.ToolList, errors=())},
        "/api/health": {"get": _op("liveness and queue depth", 200, ok_model=schemas.Health, errors=(503,))},
        **_conversation_paths(),
        **record_paths,
        **fork_paths,
        **turn_paths,
        **subagent_paths,
        **tools.openapi_paths(_op, _path, _query, _errors),
        **questions.openapi_paths(_op, _path, _query),
        **profiles_api.openapi_paths(_op, _path),
    }
    paths["/api/agents"]["post"]["responses"]["200"] = {"description": "the session exists already",
                                                       **_json(schemas.Accepted)}
    paths["/api/conversations"]["post"]["responses"]["200"] = {"description": "the conversation exists already",
                                                              **_json(schemas.Conversation)}
    paths["/api/agents"]["post"]["responses"]["202"]["links"] = _links_from_create()
    for path, operations in paths.items():
        for method, op in operations.items():
            op["operationId"] = OPERATION_IDS.get((method, path)) or _operation_id(method, path)
    for operations in paths.values():  # writes may need the optional API token
        if "post" in operations:
            operations["post"]["responses"].update(_errors(401, 413))
            operations["post"]["security"] = [{}, {"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentsvc", "version": "0.1.0",
                 "description": "Long-lived, steerable agents driven by a LanceDB action queue."},
        "paths": paths,
        "components": {"schemas": components,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "only when started with --api-token"}}},
    }
