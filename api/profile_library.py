"""The agent profiles app.py holds, and what a create naming one becomes.

app.py validates every create, so it is where a broken profile must be
refused with a 400.  A create from a profile is resolved here into a plain
create action: moniker, task and the resolved config (``config.profile``
records name, file and content hash).  agents.py therefore never reads a
profile file, and an edit of the file changes no session that already
started.  ``POST /api/profiles/reload`` (or SIGHUP to app.py) re-reads the
directory.
"""
from flask import current_app

from api import session_config
from api.context import ctx
from api.errors import ApiError
from domain.session_config import SessionConfig
from profiles.loader import ProfileLibrary, valid_name
from profiles.resolve import ResolveError, resolve
from tools import catalog

EXTENSION = "agentsvc_profiles"  # app.extensions key of the app's ProfileLibrary


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
