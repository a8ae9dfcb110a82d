"""tool_catalog: the tools each agents.py process can run, one row per worker.

app.py lists tools (``GET /api/tools``) but does not start MCP servers (only
agents.py, which calls the tools, runs them), so agents.py records the catalog
it built here and app.py reads it.  A row per worker (upserted on the declared
primary key) rather than a row per tool: a worker replaces its whole catalog
in one write, so a tool that its configuration dropped disappears at once,
and two workers with different installs cannot overwrite each other.
"""
from datetime import timedelta

from store import codec, filters, query


class ToolCatalogTable:
    name = "tool_catalog"
    key = "worker_id"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def submit(self, worker_id: str, tools: list[dict]):
        """Queue this worker's catalog (group-committed); returns the commit's future."""
        return self.writer.submit_upsert(self.name, self.key, [{
            "worker_id": filters.check_id(worker_id, "worker_id"), "updated_at": codec.utcnow(),
            "tools": codec.dumps(tools)}])

    def all(self, max_age_s: float | None = None) -> list[dict]:
        """Every worker's catalog, newest first; with ``max_age_s`` only those
        written within that many seconds."""
        where = None
        if max_age_s is not None:
            where = filters.ts_cmp("updated_at", ">=", codec.utcnow() - timedelta(seconds=max_age_s))
        return query.rows(self.table, self.name, where, order=[("updated_at", False)])
