"""The OpenAPI 3.1 document of the API, built from the routes themselves.

Each route declares what it reads and answers once, with :func:`operation`
under its Flask decorator: its query and body models (the very models
api/requests.py validates the request with), its success status and model,
and the error statuses it can answer; its docstring's first paragraph is the
operation's summary.  spectree turns those declarations, found on the app's
URL map, into the document.  spectree's own request and response validation
is switched off: the service's parsing and error bodies (api/errors.py) are
the contract, and spectree's would answer differently (an unparsable body as
``{}``, errors as 422 in its own shape).

What spectree has no words for is added from the same declarations or from a
rule that holds for every route: a body is required only when its model has a
required field (or the route says so); the links from a create's answer to
what it created (schemathesis follows them in its stateful phase); every
POST may need the API token (api/auth.py) and is refused over the size cap
(413); a path id's pattern comes from its converter (``<id:agent_id>``); and
the create body is one variant per installed moniker and per usable profile.
"""
import copy
import re
import threading
from dataclasses import dataclass, field

from flask import Flask
from pydantic import BaseModel
from spectree import Response, SpecTree
from spectree.plugins.flask_plugin import FlaskPlugin
from spectree.plugins.werkzeug_utils import werkzeug_parse_rule

from api import schemas
from monikers import endpoints
from profiles.loader import ProfileLibrary
from profiles.model import OVERRIDABLE_KEYS

REF = "#/components/schemas/{model}"
INFO = {"title": "agentsvc", "version": "0.1.0",
        "description": "Long-lived, steerable agents driven by a LanceDB action queue."}
# Any route: a token when the service has tokens (401), a role or a site it refuses (403; api/auth.py,
# api/guard.py).  Any POST also: the body size cap (413, app.py) and JSON only (415, api/guard.py).
OPEN_ROUTES = ("/api/health",)
READ_ERRORS = (401, 403)
IDEMPOTENCY_PARAMETER = {
    "name": "Idempotency-Key", "in": "header", "required": False,
    "schema": {"type": "string", "pattern": "^[!-~]{1,255}$"},
    "description": "retrying with the same key within a day answers as the first time and queues nothing new "
                   "(422 if the key was used with another request)"}
WRITE_ERRORS = (401, 403, 413, 415)


@dataclass(frozen=True)
class Declaration:
    """What a route declared beyond what spectree records."""

    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    body_required: bool = False
    links: dict = field(default_factory=dict)
    role: str | None = None  # the role it needs (api/auth.py); None: viewer to read, operator to write
    idempotent: bool = False  # takes an Idempotency-Key (api/idempotency.py)


class _FlaskRoutes(FlaskPlugin):
    """spectree's Flask reading of the URL map, with the service's path
    parameter schemas and operation ids."""

    def parse_path(self, route, path_parameter_descriptions):
        path, parameters = super().parse_path(route, path_parameter_descriptions)
        converters = self.get_current_app().url_map.converters
        kinds = {variable: kind for kind, _, variable in werkzeug_parse_rule(str(route)) if kind}
        for parameter in parameters:
            schema = getattr(converters.get(kinds.get(parameter["name"])), "openapi_schema", None)
            if schema:
                parameter["schema"] = dict(schema)
        return path, parameters

    def get_func_operation_id(self, func, path, method):
        """``get_agents_agent_id_sessions`` for ``GET /api/agents/{agent_id}/sessions``."""
        words = [w.strip("{}").replace("-", "_") for w in path.removeprefix("/api/").split("/")]
        return method.lower() + "_" + "_".join(words)


SPEC = SpecTree("flask", backend=_FlaskRoutes, mode="strict", annotations=False,
                naming_strategy=lambda model: model.__name__, nested_naming_strategy=lambda _parent, child: child,
                **INFO)
_BUILD_LOCK = threading.Lock()


def operation(ok_status: int, ok_model: type[BaseModel], *, query: type[BaseModel] | None = None,
              body: type[BaseModel] | None = None, errors=(400,), also: dict | None = None,
              body_required: bool | None = None, operation_id: str | None = None, links: dict | None = None,
              role: str | None = None, idempotent: bool = False):
    """Declare the route under it.  ``also``: further answers, ``{status: (model,
    description)}`` (a repeated create's 200, say); ``errors``: the statuses it
    answers with the error body; ``links``: ``{name: (operationId, {parameter:
    expression})}`` on its success answer; ``role``: the role a token needs
    when it is more than the method's default (api/auth.py); ``idempotent``:
    it queues actions and takes an ``Idempotency-Key`` (api/idempotency.py)."""
    if idempotent:
        errors = (*errors, 422)
    responses = {f"HTTP_{ok_status}": (ok_model, "ok"),
                 **{f"HTTP_{status}": answer for status, answer in (also or {}).items()},
                 **{f"HTTP_{status}": (schemas.Error, "error") for status in errors}}
    # validation_error_status names a status already declared, so spectree adds no answer of its own
    record = SPEC.validate(query=query, json=body, resp=Response(**responses), skip_validation=True,
                           validation_error_status=ok_status, operation_id=operation_id)
    if body_required is None:
        body_required = body is not None and any(f.is_required() for f in body.model_fields.values())
    declaration = Declaration(query, body, body_required, links or {}, role, idempotent)

    def decorate(func):
        if idempotent:
            from api.idempotency import idempotent as honour_key  # it reads requests; the document does not
            func = honour_key(func)
        view = record(func)
        view.declaration = declaration
        return view
    return decorate


def document(app: Flask, monikers, profiles: ProfileLibrary) -> dict:
    """The document as this app serves it now: built once per app from its
    routes and monikers, plus a create variant per profile usable now."""
    with _BUILD_LOCK:
        built = app.extensions.get("agentsvc_openapi")
        if built is None:
            built = app.extensions["agentsvc_openapi"] = _build(app, monikers)
    return endpoint_choices(replay_choices(profile_variants(built, profiles, monikers), profiles, monikers))


def endpoint_choices(spec: dict) -> dict:
    """``config.llm.endpoint`` names one of the operator's endpoints as they are
    now (the endpoints file is read again when it changes): any other name is a
    400, so the document lists them rather than any name-shaped string."""
    llm = spec["components"]["schemas"].get("LLMConfig")
    if llm is not None and "endpoint" in llm.get("properties", {}):
        names = sorted(endpoints.catalog().endpoints())
        field = llm["properties"]["endpoint"]
        llm["properties"]["endpoint"] = {**{k: v for k, v in field.items() if k != "anyOf"},
                                         "anyOf": [{"type": "string", "enum": names}, {"type": "null"}]}
    return spec


def _build(app: Flask, monikers) -> dict:
    doc = copy.deepcopy(SPEC.spec)
    doc.pop("tags", None)
    doc.pop("security", None)
    doc["info"] = dict(INFO)
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            _drop_empty(op)
            declaration = _declaration(app, path, method)
            if "requestBody" in op:
                op["requestBody"]["required"] = declaration.body_required
            if declaration.links:
                ok = next(code for code in op["responses"] if code.startswith("2"))
                op["responses"][ok]["links"] = {name: {"operationId": target, "parameters": parameters}
                                                for name, (target, parameters) in declaration.links.items()}
            if path in OPEN_ROUTES:
                continue
            codes = WRITE_ERRORS if method == "post" else READ_ERRORS
            op["responses"].update({str(code): {"description": "error", "content": {
                "application/json": {"schema": {"$ref": REF.format(model="Error")}}}}
                for code in codes if str(code) not in op["responses"]})
            op["security"] = [{}, {"bearer": []}]
            if declaration.role:
                op["x-role"] = declaration.role
            if declaration.idempotent:
                op.setdefault("parameters", []).append(IDEMPOTENCY_PARAMETER)
    doc["components"]["securitySchemes"] = {"bearer": {
        "type": "http", "scheme": "bearer",
        "description": "when the service has tokens (--api-token, --tokens-file): every route but /api/health; "
                       "a viewer token reads, an operator's also writes, an admin's also does what x-role "
                       "says needs admin"}}
    if monikers is not None and monikers.names():
        moniker_variants(doc["components"]["schemas"], monikers)
    return doc


def _drop_empty(op: dict) -> None:
    """No empty ``tags`` or ``description`` (spectree writes them for every operation)."""
    for key in ("tags", "description"):
        if not op.get(key):
            op.pop(key, None)
    for parameter in op["parameters"]:
        if not parameter.get("description"):
            parameter.pop("description", None)


def _declaration(app: Flask, path: str, method: str) -> Declaration:
    """The declaration of the route serving ``method`` at the document's ``path``."""
    for rule in app.url_map.iter_rules():
        if method.upper() in rule.methods and SPEC.backend.parse_path(rule, None)[0] == path:
            return getattr(app.view_functions[rule.endpoint], "declaration", Declaration())
    raise LookupError(f"no route for {method} {path}")


def moniker_variants(components: dict, monikers) -> None:
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
        variant["properties"].pop("profile", None)  # a profile's create is its own variant
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


def profile_variants(spec: dict, lib: ProfileLibrary, monikers) -> dict:
    """The document with one create-body variant per usable profile: ``profile``
    is that name, and ``config`` takes exactly the keys the profile lets a create
    override (``tools`` only from its allowed tools, ``approve`` keeping its list)."""
    spec = copy.deepcopy(spec)
    components = spec["components"]["schemas"]
    create = components["CreateAgentRequest"]
    base = copy.deepcopy(components.get("CreateAgentRequest_joke") or next(
        (components[r["$ref"].rsplit("/", 1)[1]] for r in create.get("oneOf", [])), None) or create)
    runner = components["SessionConfig"]["properties"]
    variants, tools = [], lib.known_tools()
    for entry in lib.entries():
        if entry.profile is None or lib.check(entry, tools):
            continue
        key = f"CreateAgentRequest_profile_{entry.profile.name}"
        components[key] = _profile_variant(entry.profile, base, runner, monikers)
        variants.append({"$ref": REF.format(model=key)})
    if variants:
        if "oneOf" in create:
            create = {"oneOf": create["oneOf"] + variants}  # no discriminator: profile variants have no moniker
        else:
            create = {"oneOf": [create, *variants]}
        components["CreateAgentRequest"] = create
    return spec


# Bodies that name a moniker or a profile to replay under (api/replays.py, eval runs)
REPLAY_BODIES = ("ReplayRequest", "RunRequest")


def replay_choices(spec: dict, lib: ProfileLibrary, monikers) -> dict:
    """A replay's body, as a create's, one shape per way of naming what it runs
    under: neither moniker nor profile (``config`` documents the runner's keys;
    the source's moniker's own keys are taken too, checked against it), one per
    installed moniker (the runner's keys and that moniker's), one per usable
    profile (the keys it lets a create override)."""
    components = spec["components"]["schemas"]
    runner = components["SessionConfig"]["properties"]
    tools = lib.known_tools()
    usable = [e.profile for e in lib.entries() if e.profile is not None and not lib.check(e, tools)]
    for body in REPLAY_BODIES:
        if body not in components:
            continue
        plain = copy.deepcopy(components[body])
        plain.pop("not", None)
        for key in ("profile", "moniker"):
            plain["properties"].pop(key, None)
        plain["properties"]["config"] = _config_of(runner, {}, "keys that change the source's config (and the "
                                                               "source moniker's own keys)")
        variants = [plain]
        for name in sorted(monikers.names()) if monikers is not None else []:
            model = monikers.get(name).config_model
            own = model.model_json_schema(ref_template=REF) if model is not None else {}
            components.update(own.pop("$defs", {}))
            config = _config_of(runner, own.get("properties", {}))
            if model is None:  # a moniker that declares no config model takes any further keys
                config["additionalProperties"] = True
            variants.append(_named(plain, "moniker", name, config))
        variants += [_named(plain, "profile", p.name, _profile_config(p, runner, monikers)) for p in usable]
        components[body] = {"oneOf": variants}
    return spec


def _config_of(runner: dict, own: dict, description: str | None = None) -> dict:
    config = {"type": "object", "additionalProperties": False, "properties": {**runner, **own}}
    return {**config, "description": description} if description else config


def _named(plain: dict, key: str, name: str, config: dict) -> dict:
    variant = copy.deepcopy(plain)
    variant["properties"][key] = {"type": "string", "const": name}
    variant["properties"]["config"] = config
    variant["required"] = sorted({*variant.get("required", []), key})
    return variant


def _profile_variant(p, base: dict, runner: dict, monikers) -> dict:
    variant = copy.deepcopy(base)
    variant["title"] = f"CreateAgentRequest (profile {p.name})"
    variant["properties"].pop("moniker", None)
    variant["properties"] = {"profile": {"type": "string", "const": p.name,
                                         "description": "a profile of GET /api/profiles"},
                             **variant["properties"], "config": _profile_config(p, runner, monikers)}
    variant["required"] = ["profile"]
    return variant


def _profile_config(p, runner: dict, monikers) -> dict:
    """The config a body naming profile ``p`` may carry: the keys it lets a create override."""
    moniker = monikers.get(p.moniker)
    own = moniker.config_model.model_json_schema()["properties"] if moniker.config_model else {}
    props = {}
    for key in p.overridable:
        if key == "tools":
            props[key] = {"type": "array", "items": {"enum": list(p.tools.allowed)}, "uniqueItems": False}
        elif key == "approve":
            props[key] = {"type": "array", "items": {"enum": list(p.tools.allowed)},
                          "allOf": [{"contains": {"const": t}} for t in p.tools.approve]}
        elif key == "llm" and "llm" in own:
            props[key] = own["llm"]
        elif key in runner and key in OVERRIDABLE_KEYS:
            props[key] = runner[key]
        elif key in own:
            props[key] = own[key]
    return {"type": "object", "additionalProperties": False, "properties": props}
