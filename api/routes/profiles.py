"""``/api/profiles``: the agent profiles app.py holds, with what is wrong with
them (file, line, field, why); re-reading the directory.  A create from a
profile is ``POST /api/agents`` (api/profile_library.py resolves it).
"""
import os

from flask import Blueprint, jsonify
from werkzeug.routing import BaseConverter
from pydantic import Field

from api import schemas
from api.errors import ApiError
from api.openapi import operation
from api.profile_library import library
from profiles.loader import Entry, ProfileLibrary, valid_name
from profiles.model import NAME_PATTERN
from profiles.resolve import base_config

bp = Blueprint("profiles", __name__, url_prefix="/api")


class ProfileNameConverter(BaseConverter):
    """A profile name in a path; never ``reload`` (that path is the reload route),
    so ``OPTIONS /api/profiles/reload`` allows POST only."""

    regex = r"(?!reload(?:/|$))[^/]+"
    openapi_schema = {"type": "string", "pattern": NAME_PATTERN}


@bp.record_once
def _converter(state):
    state.app.url_map.converters["profile_name"] = ProfileNameConverter


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
    directory: str = Field(description="the name of the profiles directory (not its path: where the service's "
                                       "files are is the operator's to know)")
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
    return {"profiles": [summary(e, lib.check(e, tools)) for e in lib.entries()],
            "directory": os.path.basename(os.path.abspath(lib.directory)), "loaded_at": lib.loaded_at}


# ---- routes ---------------------------------------------------------------

@bp.get("/profiles")
@operation(200, ProfileList, errors=())
def list_profiles():
    """loaded profiles, with load errors (file, line, field, why)"""
    return jsonify(_listing(library()))


@bp.get("/profiles/<profile_name:name>")
@operation(200, ProfileDetail, errors=(400, 404))
def get_profile(name):
    """one profile: content, resolved config, errors"""
    entry = library().get(name) if valid_name(name) else None
    if entry is None:
        raise ApiError(404, "not_found", f"no profile {name!r}")
    problems = library().check(entry)
    detail = summary(entry, problems)
    detail["profile"] = entry.profile.model_dump(by_alias=True, exclude_none=True) if entry.profile else None
    detail["config"] = base_config(entry) if entry.profile else None
    return jsonify(detail)


@bp.post("/profiles/reload")
@operation(200, ProfileList, errors=(), role="admin")
def reload_profiles():
    """re-read the profiles directory (also on SIGHUP)"""
    library().load()
    return jsonify(_listing(library()))
