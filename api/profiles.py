"""Routes of agent profiles: list, show, reload, and creating a session from one.

app.py holds the profiles (it validates every create, so it is where a
broken profile must be refused with a 400).  A create from a profile is
resolved here into a plain create action: moniker, task and the resolved
config (``config.profile`` records name, file and content hash).  agents.py
therefore never reads a profile file, and an edit of the file changes no
session that already started.  ``POST /api/profiles/reload`` (or SIGHUP to
app.py) re-reads the directory.
"""
import copy

from flask import Blueprint, current_app, jsonify
from werkzeug.routing import BaseConverter
from pydantic import Field

from api import schemas, session_config
from api.errors import ApiError
from api.routes import ctx
from profiles.loader import Entry, ProfileLibrary, valid_name
from profiles.model import OVERRIDABLE_KEYS
from profiles.resolve import ResolveError, base_config, resolve
from domain.session_config import SessionConfig
from tools import catalog

bp = Blueprint("profiles", __name__, url_prefix="/api")
EXTENSION = "agentsvc_profiles"


class ProfileNameConverter(BaseConverter):
    """A profile name in a path; never ``reload`` (that path is the reload route),
    so ``OPTIONS /api/profiles/reload`` allows POST only."""

    regex = r"(?!reload(?:/|$))[^/]+"


@bp.record_once
def _converter(state):
    state.app.url_map.converters["profile_name"] = ProfileNameConverter


def library() -> ProfileLibrary:
    return current_app.extensions[EXTENSION]


def make_library(directory: str, monikers, store, local_tools) -> ProfileLibrary:
    """The app's library: monikers from this process, tools from the merged
    catalog (built-ins here, plus what the workers' MCP servers offer)."""
    def tool_names() -> set[str]:
        try:
            return {t["name"] for t in catalog.list_tools(store, local_tools)}
        except Exception:  # the store is unreachable: check against what this process has
            return set(local_tools.names())
    lib = ProfileLibrary(directory, monikers=monikers, tool_names=tool_names)
    lib.load()
    return lib


# ---- models ---------------------------------------------------------------

class ProblemInfo(schemas.Open):
    file: str
    line: int | None = None
    field: str | None = None
    message: str


class ProfileSummary(schemas.Open):
    name: str
    file: str
    hash: str | None = Field(description="sha256 of the file's bytes (first 16 hex digits)")
    ok: bool = Field(description="usable: loaded and every reference (moniker, tools) is installed")
    description: str | None = None
    moniker: str | None = None
    errors: list[ProblemInfo]
    loaded_at: str


class ProfileList(schemas.Open):
    profiles: list[ProfileSummary]
    directory: str
    loaded_at: str | None = None


class ProfileDetail(ProfileSummary):
    profile: dict | None = Field(description="the file's content as validated (null when it did not load)")
    config: dict | None = Field(description="the session config a create without overrides would get")


def summary(entry: Entry, problems) -> dict:
    p = entry.profile
    return {"name": entry.name, "file": entry.file, "hash": entry.hash, "ok": not problems,
            "description": p.description if p else None, "moniker": p.moniker if p else None,
            "errors": [x.as_dict() for x in problems], "loaded_at": entry.loaded_at}


def _listing(lib: ProfileLibrary) -> dict:
    tools = lib.known_tools()  # one catalog read for the whole list
    return {"profiles": [summary(e, lib.check(e, tools)) for e in lib.entries()], "directory": lib.directory,
            "loaded_at": lib.loaded_at}


# ---- routes ---------------------------------------------------------------

@bp.get("/profiles")
def list_profiles():
    return jsonify(_listing(library()))


@bp.get("/profiles/<profile_name:name>")
def get_profile(name):
    entry = library().get(name) if valid_name(name) else None
    if entry is None:
        raise ApiError(404, "not_found", f"no profile {name!r}")
    problems = library().check(entry)
    detail = summary(entry, problems)
    detail["profile"] = entry.profile.model_dump(by_alias=True, exclude_none=True) if entry.profile else None
    detail["config"] = base_config(entry) if entry.profile else None
    return jsonify(detail)


@bp.post("/profiles/reload")
def reload_profiles():
    library().load()
    return jsonify(_listing(library()))


def create_payload(req) -> tuple[str, dict]:
    """(moniker, config) for a create naming ``req.profile``; a 400 naming the
    file, line and field when the profile is broken or the overrides are not
    allowed."""
    entry = library().get(req.profile) if valid_name(req.profile) else None
    if entry is None:
        names = [e.name for e in library().entries()]
        raise ApiError(400, "unknown_profile", f"no profile {req.profile!r}; loaded: {names}")
    problems = library().check(entry)
    if problems:
        raise ApiError(400, "invalid_profile", f"profile {req.profile!r} cannot be used: "
                       + "; ".join(p.describe() for p in problems))
    overrides = req.config.model_dump(exclude_unset=True)
    try:
        config = resolve(entry, overrides)
    except ResolveError as exc:
        raise ApiError(400, "invalid_config", str(exc)) from None
    moniker = ctx().monikers.get(entry.profile.moniker)
    try:
        checked = session_config.check(SessionConfig.model_validate(config), moniker)
    except ApiError:
        raise
    except Exception as exc:  # pydantic: an override of the wrong type
        raise ApiError(400, "invalid_config", f"config: {exc}") from None
    return entry.profile.moniker, checked


# ---- OpenAPI --------------------------------------------------------------

MODELS = [ProblemInfo, ProfileSummary, ProfileList, ProfileDetail]


def openapi_paths(op, path_param) -> dict:
    name = {"name": "name", "in": "path", "required": True,
            "schema": {"type": "string", "pattern": r"^[a-z0-9][a-z0-9_-]{0,63}$"}}
    return {
        "/api/profiles": {"get": op("loaded profiles, with load errors (file, line, field, why)", 200,
                                    ok_model=ProfileList, errors=())},
        "/api/profiles/{name}": {"get": op("one profile: content, resolved config, errors", 200,
                                           ok_model=ProfileDetail, params=[name], errors=(400, 404))},
        "/api/profiles/reload": {"post": op("re-read the profiles directory (also on SIGHUP)", 200,
                                            ok_model=ProfileList, errors=())},
    }


def create_variants(spec: dict, lib: ProfileLibrary, monikers) -> dict:
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
        p = entry.profile
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
        variant = copy.deepcopy(base)
        variant["title"] = f"CreateAgentRequest (profile {p.name})"
        variant["properties"].pop("moniker", None)
        variant["properties"] = {"profile": {"type": "string", "const": p.name,
                                             "description": "a profile of GET /api/profiles"},
                                 **variant["properties"],
                                 "config": {"type": "object", "additionalProperties": False, "properties": props}}
        variant["required"] = ["profile"]
        key = f"CreateAgentRequest_profile_{p.name}"
        components[key] = variant
        variants.append({"$ref": f"#/components/schemas/{key}"})
    if variants:
        if "oneOf" in create:
            create = {"oneOf": create["oneOf"] + variants}  # no discriminator: profile variants have no moniker
        else:
            create = {"oneOf": [create, *variants]}
        components["CreateAgentRequest"] = create
    return spec
