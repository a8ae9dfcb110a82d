"""agent_state: the latest snapshot of each agent session, one row per session_id."""
from concurrent.futures import Future

from store import codec, filters, query

STATUSES = {"running", "paused", "stopping", "stopped", "done", "error"}
RESUMABLE = ("running", "paused", "stopping")


class StateTable:
    name = "agent_state"
    key = "session_id"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def save(self, snapshot: dict) -> None:
        self.submit(snapshot).result()

    def submit(self, snapshot: dict) -> Future:
        """Queue insert-or-replace of the snapshot of ``snapshot['session_id']``
        (merge_insert on the declared primary key, never an overwrite of the
        table); the future resolves once it is durable."""
        row = dict(snapshot)
        row["updated_at"] = codec.utcnow()
        return self.writer.submit_upsert(self.name, self.key, [row])

    def get(self, session_id: str) -> dict | None:
        return query.first(self.table, self.name, filters.eq_id("session_id", session_id))

    def latest_for_agent(self, agent_id: str) -> dict | None:
        return query.first(self.table, self.name, filters.eq_id("agent_id", agent_id),
                           order=[("created_at", False), ("session_id", False)])

    def sessions_for_agent(self, agent_id: str, limit: int = 100, offset: int = 0) -> list[dict]:
        return query.rows(self.table, self.name, filters.eq_id("agent_id", agent_id),
                          order=[("created_at", False), ("session_id", False)], limit=limit, offset=offset)

    def agents(self, limit: int = 100, offset: int = 0) -> list[dict]:
        """Each agent once, with its latest session's snapshot, newest agents first."""
        latest: dict[str, dict] = {}
        for row in query.rows(self.table, self.name, None, order=[("created_at", False), ("session_id", False)]):
            latest.setdefault(row["agent_id"], row)
        return list(latest.values())[offset:offset + limit]

    def resumable(self) -> list[dict]:
        where = filters.in_words("status", RESUMABLE, STATUSES)
        return query.rows(self.table, self.name, where, order=[("created_at", True)])
