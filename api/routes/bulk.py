"""``POST /api/agents/bulk``: one control for many agents at once (fleet controls).

A bulk call picks sessions as the agents list shows them, i.e. each agent's
latest applied session (``GET /api/agents``; a session whose create is still
queued is not picked), keeps those matching every filter given, and appends
one action per session to the queue: the same actions the single-agent
controls append, applied by the agent service at each session's next step
boundary, each with its own outcome (``GET /api/actions/<action_id>``).

Sessions whose status the action cannot change are skipped rather than sent
an action bound to fail (pausing a finished or already paused session,
resuming a running one): ``skipped`` counts them.  A destroy reaches every
match, finished ones too: as a single destroy does, it also ends the session's
sub-agents, which a finished parent may still have at work.

``dry_run`` answers 200 with what matches and queues nothing (the dashboard
shows it before asking for confirmation).  A call queues at most ``MAX_ACTIONS``
actions: past that it is a 400 unless ``limit`` asks for the first ones.  A
bulk call is idempotent only under an ``Idempotency-Key`` (api/idempotency.py):
without one, repeating a pause, resume or destroy changes nothing more, but a
repeated interrupt delivers its guidance twice.
"""
from typing import Annotated, Literal

from flask import jsonify
from flask import Blueprint
from pydantic import Field, StrictBool, StringConstraints, field_validator, model_validator

from api import auth
from api.context import ctx
from api.errors import ApiError
from api.openapi import operation
from api.requests import body
from api.sessions import queue
from api.schemas import AGENT_STATUSES, MAX_TEXT, NOT_BLANK, Id, Open, Strict, not_blank
from domain.statuses import SESSION_STATUSES

bp = Blueprint("bulk", __name__, url_prefix="/api")

MAX_ACTIONS = 1000
# Acting on many sessions at once in a way that ends them or makes them spend
# again needs the admin role (api/auth.py); pausing and guiding many does not.
ADMIN_ACTIONS = frozenset({"destroy", "resume"})
PREVIEW_ROWS = 1000
# the statuses each action can change (the others are skipped); a destroy reaches every session
APPLIES = {"pause": frozenset({"running", "waiting"}), "resume": frozenset({"paused", "error"}),
           "interrupt": frozenset({"running", "waiting", "paused", "error"}), "destroy": frozenset(SESSION_STATUSES)}
WORD = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
Text = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")]


def no_default(extra: dict | None = None):
    """A field that may be left out but never be null: its document shows no
    ``default: null`` (which a client could take for a value to send)."""
    def edit(schema: dict) -> None:
        schema.pop("default", None)
        schema.update(extra or {})
    return edit


class BulkFilter(Strict):
    """Every filter given must hold (AND); none given matches every agent."""

    status: Literal[AGENT_STATUSES] | None = Field(None, description="the latest session's status")
    moniker: str | None = Field(None, min_length=1, max_length=128, pattern=WORD)
    profile: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$",
                                description="the profile the session was created from (config.profile.name)")
    model: Text | None = Field(None, description="the session config's LLM model (config.llm.model) as "
                                                 "written in its config; a session on the service's default "
                                                 "model has none")
    q: Text | None = Field(None, description="text in the name, task, agent_id or session_id "
                                             "(case-insensitive), as the agents list's search")
    ids: list[Id] | None = Field(None, min_length=1, max_length=MAX_ACTIONS, description="agent ids")


class BulkRequest(Strict):
    # guidance: only with interrupt, and required there unless it is a preview
    model_config = Strict.model_config | {"json_schema_extra": {"allOf": [
        {"if": {"properties": {"action": {"not": {"const": "interrupt"}}}, "required": ["action"]},
         "then": {"not": {"required": ["guidance"]}}},
        {"if": {"properties": {"action": {"const": "interrupt"}, "dry_run": {"const": False}}, "required": ["action"]},
         "then": {"required": ["guidance"]}}]}}

    filter: BulkFilter
    action: Literal["pause", "resume", "destroy", "interrupt"]
    guidance: str = Field(None, min_length=1, max_length=MAX_TEXT, json_schema_extra=no_default(NOT_BLANK),
                          description="for interrupt (required there unless dry_run; refused with other actions)")
    dry_run: StrictBool = Field(False, description="answer 200 with what matches; queue nothing")
    limit: int = Field(None, ge=1, le=MAX_ACTIONS, json_schema_extra=no_default(), description="act on at most this many of the sessions "
                       "the action applies to, oldest first (default: all, and more than "
                       f"{MAX_ACTIONS} is a 400)")

    @field_validator("guidance")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return not_blank(value, "guidance")

    @model_validator(mode="after")
    def _guidance_with_interrupt(self) -> "BulkRequest":
        given = "guidance" in self.model_fields_set
        if self.action != "interrupt" and given:
            raise ValueError("guidance goes only with interrupt")
        if self.action == "interrupt" and not given and not self.dry_run:
            raise ValueError("interrupt needs guidance")
        return self


class BulkSession(Open):
    agent_id: str
    session_id: str
    name: str | None = None
    moniker: str | None = None
    status: str
    applies: bool = Field(description="the action would be sent to it (else: skipped for its status)")


class BulkPreview(Open):
    matched: int = Field(description="sessions matching the filter")
    applies: int = Field(description="of them, those the action would reach")
    sessions: list[BulkSession] = Field(description=f"the matches, oldest first (at most {PREVIEW_ROWS})")
    truncated: bool


class BulkAction(Open):
    agent_id: str
    session_id: str
    action_id: str


class BulkAccepted(Open):
    matched: int = Field(description="sessions matching the filter")
    skipped: int = Field(description="matches whose status the action cannot change")
    remaining: int = Field(description="matches the action applies to but left out by limit")
    actions: list[BulkAction] = Field(description="one queued action per session, oldest session first")


@bp.post("/agents/bulk")
@operation(202, BulkAccepted, body=BulkRequest, body_required=True, errors=(400,), idempotent=True,
           also={200: (BulkPreview, "dry_run: what matches; nothing queued")}, operation_id="bulkControl")
def bulk_control():
    """pause, resume, interrupt or destroy every agent matching a filter (each
    agent's latest session, one queued action per session)"""
    req: BulkRequest = body()
    if req.action in ADMIN_ACTIONS and not req.dry_run:
        auth.require("admin")
    f = req.filter
    matched = ctx().store.states.latest_matching(status=f.status, moniker=f.moniker, text=f.q, agent_ids=f.ids,
                                                 profile=f.profile, model=f.model)
    targets = [r for r in matched if r["status"] in APPLIES[req.action]]
    if req.dry_run:
        return jsonify(preview(matched, targets)), 200
    if len(targets) > MAX_ACTIONS and req.limit is None:
        raise ApiError(400, "too_many", f"{len(targets)} sessions match; a bulk call acts on at most {MAX_ACTIONS}: "
                                        "narrow the filter, or pass limit to act on the oldest ones first")
    chosen = targets[:req.limit or MAX_ACTIONS]
    payload = {"guidance": req.guidance} if req.action == "interrupt" else {}

    def answer(rows):
        return {"matched": len(matched), "skipped": len(matched) - len(targets),
                "remaining": len(targets) - len(chosen),
                "actions": [{"agent_id": a["agent_id"], "session_id": a["session_id"], "action_id": a["id"]}
                            for a in rows]}, 202
    body_, status, _ = queue(req.action, [(r["agent_id"], r["session_id"]) for r in chosen], payload, answer)
    return jsonify(body_), status


def preview(matched: list[dict], targets: list[dict]) -> dict:
    reached = {r["session_id"] for r in targets}
    rows = [{"agent_id": r["agent_id"], "session_id": r["session_id"], "name": r.get("name"),
             "moniker": r.get("moniker"), "status": r["status"], "applies": r["session_id"] in reached}
            for r in matched[:PREVIEW_ROWS]]
    return {"matched": len(matched), "applies": len(targets), "sessions": rows,
            "truncated": len(matched) > PREVIEW_ROWS}
