"""Which tools are installed, as ``GET /api/tools`` lists them, across processes.

agents.py runs the tools, MCP servers included; app.py only lists them and
must not start MCP servers (processes named by the operator, run where the
calls run).  So agents.py records the catalog it built in the store
(``store.tool_catalog``, one row per worker, rewritten at start and whenever
an MCP server's tools or status change), and app.py merges it over its own
registry of built-ins and plugins (:func:`service_registry`).  The store, not a file in the data dir,
because app.py and the workers may be on different machines sharing one
database on object storage.

An entry is a tool's ``describe()`` (name, description, args_schema, timeout_s,
idempotent, needs_approval, external) plus ``source`` (``installed`` or
``mcp``) and, for an MCP tool, ``mcp: {server, tool, status, error}`` as its
worker last saw it.  ``workers`` names the agents.py processes that offer it
(empty for a tool known only to app.py's own install).
"""
import logging

from store import search as store_search
from tools import http_fetch, search_history, spawn_agent
from tools.tool_registry import ToolRegistry, default_tool_registry

log = logging.getLogger("tools.catalog")


def installed_registry(fetch_policy: http_fetch.FetchPolicy | None = None) -> ToolRegistry:
    """The built-in tools and every plugin installed under ``agentsvc.tools``
    (MCP tools are added by :class:`tools.mcp.McpBridge` in agents.py)."""
    registry = default_tool_registry()
    registry.register(http_fetch.make_tool(fetch_policy or http_fetch.FetchPolicy.from_env()))
    return registry


def service_registry(store, monikers, fetch_policy: http_fetch.FetchPolicy | None = None,
                     profiles=None) -> ToolRegistry:
    """:func:`installed_registry` plus the built-ins bound to the service's store:
    ``search_history``, ``spawn_agent`` and ``message_agent`` (``profiles``: see
    tools/spawn_agent.py).  agents.py runs these; app.py lists them and checks
    profiles against them, so a profile naming them is usable before any
    worker has published its catalog."""
    registry = installed_registry(fetch_policy)
    registry.register(search_history.build(history_search(store)))
    for tool in spawn_agent.build(store, monikers, profiles):
        registry.register(tool)
    return registry


def history_search(store) -> search_history.HistorySearch:
    """``search_history``'s search over the service's store: hybrid (vector and
    full-text) when the store has semantic search configured and the text has
    terms, full-text otherwise."""

    def search(text: str, *, limit: int, agent_id: str | None, session_id: str | None) -> list[dict]:
        query = store_search.SearchQuery(terms=store_search.terms_of(text), limit=limit, agent_id=agent_id,
                                         session_id=session_id)
        semantic = getattr(store, "semantic", None)
        if semantic is not None and query.terms:
            hits, _reason = semantic.hybrid(store.tables, query, text)
            return hits
        return store_search.fts(store.tables, query)

    return search


def entries(registry: ToolRegistry, bridge=None) -> list[dict]:
    """What this process can run, in the catalog's shape, sorted by name."""
    out = []
    for description in registry.describe():
        mcp = bridge.describe(description["name"]) if bridge is not None else None
        entry = {**description, "source": "mcp" if mcp else "installed"}
        if mcp:
            entry["mcp"] = mcp
        out.append(entry)
    return out


def publish(store, worker_id: str, registry: ToolRegistry, bridge=None):
    """Record this worker's catalog; returns the commit's future (callers that
    must not block the event loop do not wait on it)."""
    tools = entries(registry, bridge)
    log.info("tool catalog of %s: %d tool(s)", worker_id, len(tools))
    return store.tool_catalog.submit(worker_id, tools)


def list_tools(store, local: ToolRegistry | None = None) -> list[dict]:
    """The merged catalog: every worker's entries (the most recently written
    wins where two workers describe one name differently) over the local
    registry's, sorted by name."""
    merged: dict[str, dict] = {}
    if local is not None:
        for entry in entries(local):
            merged[entry["name"]] = {**entry, "workers": []}
    offered: dict[str, list[str]] = {}
    for row in store.tool_catalog.all():  # newest first
        tools = row.get("tools")
        if not isinstance(tools, list):
            log.warning("tool catalog of %s is unreadable; skipped", row.get("worker_id"))
            continue
        for entry in tools:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            name = entry["name"]
            if name not in offered:
                merged[name] = dict(entry)
                offered[name] = []
            offered[name].append(row["worker_id"])
    for name, workers in offered.items():
        merged[name]["workers"] = sorted(workers)
    return [merged[name] for name in sorted(merged)]
