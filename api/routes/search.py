"""``GET /api/search`` and ``GET /api/summaries``: the record, searchable.

Search runs LanceDB's full-text index over steps, messages, summaries and tool
calls (store/search.py).  When an embeddings endpoint is configured it also
runs a vector search and fuses the two rankings (``"mode": "hybrid"``);
otherwise, or when the endpoint fails, the answer says ``"mode": "fts"`` and
why.  A hit names the exact row and a ``link`` into the dashboard.
"""
import logging
from typing import Literal
from datetime import datetime

from flask import Blueprint, jsonify
from pydantic import ConfigDict, Field, field_validator

from api.context import ctx
from api.openapi import operation
from api.requests import query
from api.schemas import Id, Open, Strict, clamp_to_calendar
from store import search as store_search

log = logging.getLogger("api.search")

bp = Blueprint("search", __name__, url_prefix="/api")

MAX_QUERY_CHARS = 1000
MAX_MONIKER_SESSIONS = 5000
MAX_OFFSET = 1000  # a page past the best 1,200 hits is not worth ranking that deep


_KIND = "(step|message|tool_call|summary)"
KIND_LIST = rf"^{_KIND}(,{_KIND})*$"  # the document states what the validator below accepts


class SearchRequest(Strict):
    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="words to look for (no query syntax)")
    kind: str | None = Field(None, max_length=100, pattern=KIND_LIST,
                             description="comma-separated: step, message, tool_call, summary")
    agent_id: Id | None = None
    session_id: Id | None = None
    conversation_id: Id | None = None
    status: Literal[tuple(sorted(store_search.STATUSES))] | None = Field(
        None, description="the row's status (steps and tool calls)")
    since: datetime | None = Field(None, description="ISO-8601; rows created at or after it")
    until: datetime | None = Field(None, description="ISO-8601; rows created before it")
    moniker: Id | None = Field(None, description="only rows of sessions running this moniker")
    limit: int = Field(20, ge=1, le=200)
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="hits to skip (the next page: offset + limit)")
    mode: str = Field("auto", pattern="^(auto|fts)$", description="auto: hybrid when embeddings are configured")

    @field_validator("kind")
    @classmethod
    def _kinds(cls, value: str | None) -> str | None:
        if value is None:
            return value
        kinds = [k.strip() for k in value.split(",") if k.strip()]
        unknown = [k for k in kinds if k not in store_search.KINDS]
        if unknown or not kinds:
            raise ValueError(f"kind must be a comma-separated list of {sorted(store_search.KINDS)}")
        return ",".join(kinds)

    @field_validator("status")
    @classmethod
    def _status(cls, value: str | None) -> str | None:
        if value is not None and value not in store_search.STATUSES:
            raise ValueError(f"status must be one of {sorted(store_search.STATUSES)}")
        return value

    @field_validator("since", "until")
    @classmethod
    def _dates(cls, value, info):
        return clamp_to_calendar(value)  # no row is older or newer: the answer is the same


class SummaryQuery(Strict):
    agent_id: Id | None = None
    session_id: Id | None = None
    conversation_id: Id | None = None
    limit: int = Field(50, ge=1, le=1000)
    offset: int = Field(0, ge=0, le=1_000_000)


class Hit(Open):
    kind: str
    id: str
    created_at: str | None = None
    score: float
    agent_id: str | None = None
    session_id: str | None = None
    conversation_id: str | None = None
    iteration: int | None = None
    snippet: str
    highlights: list[list[int]] = Field(description="[start, end) offsets into snippet of matched words")
    link: str = Field(description="the dashboard's address of the row (a #/ hash route)")
    agent_name: str | None = Field(None, description="the name of the hit's session (null: none, or no session)")
    moniker: str | None = Field(None, description="the moniker of the hit's session")


class SearchResult(Open):
    model_config = ConfigDict(extra="allow")
    query: str
    terms: list[str]
    mode: str = Field(description="fts or hybrid")
    hits: list[Hit]
    offset: int
    limit: int
    more: bool = Field(description="a next page exists (ask again with offset + limit)")


class SummaryList(Open):
    summaries: list[dict]


def link_of(hit: dict) -> str:
    """Where the dashboard shows the row: a session page scrolled to the step
    (and tool call), or a conversation page at the message."""
    if hit["kind"] == "message" and hit.get("conversation_id"):
        return f"#/conversation/{hit['conversation_id']}?message={hit['id']}"
    if hit["kind"] == "summary" and not hit.get("session_id") and hit.get("conversation_id"):
        return f"#/conversation/{hit['conversation_id']}"
    link = f"#/session/{hit['session_id']}" if hit.get("session_id") else "#/"
    if hit["kind"] == "summary":
        return link + "?summary=1"
    if hit.get("iteration") is not None:
        link += f"?iteration={hit['iteration']}"
        if hit["kind"] == "tool_call":
            link += f"&tool_call={hit['id']}"
    return link


def build_query(req: SearchRequest, store) -> store_search.SearchQuery:
    session_ids = None
    if req.moniker:
        session_ids = store.states.session_ids_of_moniker(req.moniker, limit=MAX_MONIKER_SESSIONS)
    kinds = frozenset(req.kind.split(",")) if req.kind else store_search.KINDS
    return store_search.SearchQuery(
        terms=store_search.terms_of(req.q), kinds=kinds, agent_id=req.agent_id, session_id=req.session_id,
        conversation_id=req.conversation_id, status=req.status, since=req.since, until=req.until,
        session_ids=session_ids, limit=req.offset + req.limit + 1)  # one more: is there a next page?


@bp.get("/search")
@operation(200, SearchResult, query=SearchRequest)
def search():
    """full-text (and semantic, when configured) search over steps, messages, tool calls and summaries"""
    return jsonify(run_search(query(), ctx().store))


def run_search(req: SearchRequest, store) -> dict:
    """The search's answer (also what resolves an eval set's ``search``, api/routes/evals.py)."""
    q = build_query(req, store)
    semantic = getattr(store, "semantic", None)
    result = {"query": req.q, "terms": q.terms}
    if req.mode == "auto" and semantic is not None and q.terms:
        hits, reason = semantic.hybrid(store.tables, q, req.q)
        result["mode"] = "hybrid" if reason is None else "fts"
        if reason:
            result["semantic"] = reason
    else:
        failed: list[str] = []
        hits = store_search.fts(store.tables, q, failed)
        if failed:
            result["incomplete"] = failed  # kinds left out because their table could not be read
        result["mode"] = "fts"
        result["semantic"] = "not configured" if semantic is None else "not requested"
    page = hits[req.offset:req.offset + req.limit]
    names = store.states.get_many([h["session_id"] for h in page if h.get("session_id")],
                                  columns=("session_id", "name", "moniker"))  # one read per page
    for hit in page:
        hit["link"] = link_of(hit)
        known = names.get(hit.get("session_id")) or {}
        hit["agent_name"], hit["moniker"] = known.get("name"), known.get("moniker")
    result.update(hits=page, offset=req.offset, limit=req.limit, more=len(hits) > req.offset + req.limit)
    return result


@bp.get("/summaries")
@operation(200, SummaryList, query=SummaryQuery)
def summaries():
    """session and conversation summaries, newest first"""
    req: SummaryQuery = query()
    rows = ctx().store.summaries.newest(agent_id=req.agent_id, session_id=req.session_id,
                                       conversation_id=req.conversation_id, limit=req.limit, offset=req.offset)
    return jsonify({"summaries": rows, "limit": req.limit, "offset": req.offset})
