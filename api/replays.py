"""What a replay is made of: its request body and the create payload it becomes.

Shared by ``POST /api/sessions/<id>/replay`` (api/routes/replay.py) and the
eval runs, which replay every session of a set under one set of overrides.
The agent service does the replaying (runtime/session/replay.py); this module only
checks the request against the source session and the installed monikers and
profiles, so a bad override is a 400 here rather than a failed action later.
"""
import json
from types import SimpleNamespace
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from api.context import ctx
from api.errors import ApiError
from api.profile_library import create_payload
from api.schemas import MAX_CONFIG_BYTES, Id, Strict
from domain.session_config import SessionConfig
from api.session_config import RUNNER_KEYS, changed_config


class ReplayRequest(Strict):
    # at most one of profile and moniker, said in the document too (a body it calls valid is never refused)
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": {"required": ["profile", "moniker"]}})

    from_iteration: int = Field(0, ge=0, le=2**62, description="the first step re-run (the replay starts from "
                                                                 "the state before it)")
    to_iteration: int | None = Field(None, ge=0, le=2**62, description="the last step re-run (default: until the "
                                                                         "session ends as sessions do)")
    # declared as the session keys (as a create's), so the document says what is accepted
    config: SessionConfig | None = Field(None, description="keys that change the source's config (or the "
                                                             "profile's, with profile)")
    profile: str | None = Field(None, min_length=1, max_length=64, description="run under this profile instead")
    moniker: str | None = Field(None, min_length=1, max_length=128, description="run under this moniker instead")
    tools: Literal["recorded", "live", "recorded_then_live"] = Field(
        "recorded", description="recorded: serve recorded tool results, stop at the first call that differs; "
                                "recorded_then_live: run that call and later ones live; live: run every call")
    children: Literal["served"] = Field("served", description="a recorded sub-agent's result is served from its "
                                                              "record, not spawned again")
    session_id: Id | None = Field(None, description="the replay's id; a client-supplied one makes it idempotent")

    @field_validator("config")
    @classmethod
    def _config_size(cls, value):
        return capped_changes(value)

    @model_validator(mode="after")
    def _consistent(self) -> "ReplayRequest":
        if self.profile is not None and self.moniker is not None:
            raise ValueError("give at most one of profile or moniker (a profile names its moniker)")
        return self


def capped_changes(config: SessionConfig | None) -> SessionConfig | None:
    """``config`` unchanged, unless the keys it sets are over the size a create's config may be."""
    if config is not None and len(json.dumps(changes_of(config), default=str)) > MAX_CONFIG_BYTES:
        raise ValueError(f"config must serialise to at most {MAX_CONFIG_BYTES} bytes")
    return config


def changes_of(config: SessionConfig | None) -> dict:
    """The keys a request's config sets (not the defaults it would fill in)."""
    return config.model_dump(exclude_unset=True) if config is not None else {}


def check_range(from_iteration: int, to_iteration: int | None) -> None:
    """A replay's steps run from ``from_iteration`` to ``to_iteration``: a 422
    when they are the wrong way round.  Each is valid alone, so the document
    cannot refuse the pair (schemathesis sent one and counted a 400 as a valid
    request refused); 422 says "well-formed, but it cannot be done"."""
    if to_iteration is not None and to_iteration < from_iteration:
        raise ApiError(422, "invalid_range", f"to_iteration ({to_iteration}) must be no less than "
                                             f"from_iteration ({from_iteration})")


def replay_payload(source: dict, req: ReplayRequest) -> dict:
    """The create payload of a replay of ``source`` (a snapshot that has
    started), its overrides checked; a 400, 404 or 422 when they cannot apply."""
    session_id = source["session_id"]
    check_range(req.from_iteration, req.to_iteration)
    steps = ctx().store.steps.search(session_id=session_id, min_iteration=req.from_iteration,
                                     max_iteration=req.from_iteration, limit=1)
    if not steps:
        raise ApiError(404, "not_found", f"session {session_id} has no step {req.from_iteration} to replay from")
    moniker, config = _moniker_and_config(source, req)
    replay = {"session_id": session_id, "from_iteration": req.from_iteration, "to_iteration": req.to_iteration,
              "tools": req.tools, "children": req.children}
    payload = {"moniker": moniker, "task": source.get("task") or "", "config": config, "conversation_id": None,
               "replay": replay}
    if source.get("name"):
        payload["name"] = source["name"]
    return payload


def _moniker_and_config(source: dict, req: ReplayRequest) -> tuple[str, dict]:
    if req.profile is not None:
        return create_payload(SimpleNamespace(profile=req.profile, config=req.config or SessionConfig()))
    name = req.moniker or source["moniker"]
    if name not in ctx().monikers:
        raise ApiError(400, "unknown_moniker", f"no moniker {name!r}; installed: {ctx().monikers.names()}")
    original = dict(source.get("config") or {})
    if name != source["moniker"]:  # the old moniker's own keys mean nothing to another
        original = {k: v for k, v in original.items() if k in RUNNER_KEYS}
    return name, changed_config(original, changes_of(req.config), ctx().monikers.get(name))
