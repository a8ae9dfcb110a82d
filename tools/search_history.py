"""The built-in ``search_history`` tool: an agent searches its own record
(summaries of past sessions, earlier steps, messages, tool calls), so that it
can use what it did before without carrying it all in its prompt.

``{query, scope?, limit?}``: ``scope`` is ``session`` (this session),
``agent`` (every session of this agent, the default) or ``all`` (every
agent's record, only when the session's config allows it with
``search_history: {allow_all: true}``).  Session summaries come first, then
steps, messages and tool calls by relevance; each hit is short (a snippet, or
a summary's text) so that the result fits in a prompt.

The tool only reads (no action, no write), so it is idempotent and safe to
run again after a crash.  How the record is searched is not this module's:
whoever builds the tool gives it a :class:`HistorySearch` (tools/catalog.py
gives one over the service's store), so tools/ knows nothing of storage.
"""
import asyncio
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from tools.tool import Tool, ToolContext

NAME = "search_history"


class SearchHistoryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=1000, description="words to look for")
    scope: Literal["session", "agent", "all"] = Field(
        "agent", description="session: this session; agent: all sessions of this agent; all: every agent "
                             "(needs config search_history.allow_all)")
    limit: int = Field(10, ge=1, le=50)


class ScopeNotAllowed(PermissionError):
    pass


class HistorySearch(Protocol):
    """Searches the record for ``text``, at most ``limit`` hits, within one
    agent's or one session's record when given (None: not narrowed).  Each
    hit is a dict with ``kind`` (``summary``, ``step``, ``message``,
    ``tool_call``), ``snippet``, and where known ``session_id``,
    ``iteration``, ``created_at`` and (a tool call's) ``name``.  Called in a
    worker thread: it may block."""

    def __call__(self, text: str, *, limit: int, agent_id: str | None, session_id: str | None) -> list[dict]: ...


def allows_all(config: dict) -> bool:
    options = (config or {}).get("search_history")
    return isinstance(options, dict) and options.get("allow_all") is True


def build(search: HistorySearch) -> Tool:
    """The tool, searching with ``search``."""

    async def run(args: SearchHistoryArgs, ctx: ToolContext) -> dict:
        if args.scope == "all" and not allows_all(ctx.config):
            raise ScopeNotAllowed("scope 'all' is not allowed for this session "
                                  "(its config needs search_history.allow_all: true); use 'agent' or 'session'")
        hits = await asyncio.to_thread(search, args.query, limit=args.limit,
                                       agent_id=ctx.agent_id if args.scope == "agent" else None,
                                       session_id=ctx.session_id if args.scope == "session" else None)
        return {"query": args.query, "scope": args.scope, "hits": [_compact(h) for h in summaries_first(hits)]}

    return Tool(name=NAME, description="Search your own history: summaries of past sessions, earlier steps, "
                                        "messages and tool calls. Summaries come first.",
                run=run, args_model=SearchHistoryArgs, timeout_s=30.0, idempotent=True,
                reusable=False)


def summaries_first(hits: list[dict]) -> list[dict]:
    return [h for h in hits if h["kind"] == "summary"] + [h for h in hits if h["kind"] != "summary"]


def _compact(hit: dict) -> dict:
    out = {k: hit.get(k) for k in ("kind", "session_id", "iteration", "created_at") if hit.get(k) is not None}
    out["text"] = hit["snippet"]
    if hit["kind"] == "tool_call":
        out["name"] = hit.get("name")
    return out
