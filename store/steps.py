"""agent_steps: append-only history, one row per iteration of a session."""
from concurrent.futures import Future
from datetime import datetime

from ulid import ULID

from store import codec, filters, query

STATUSES = {"ok", "done", "error", "interrupted"}


class StepLog:
    name = "agent_steps"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def append(self, step: dict) -> dict:
        row, committed = self.submit(step)
        committed.result()
        return row

    def submit(self, step: dict) -> tuple[dict, Future]:
        """Queue a step row for the next group commit: the row as it will be
        stored, and a future that resolves once it is durable."""
        row = {"id": str(ULID()), "created_at": codec.utcnow(), **step}
        committed = self.writer.submit_append(self.name, [row])
        return codec.decode(self.name, codec.encode(self.name, row)), committed

    def search(self, *, session_id: str | None = None, agent_id: str | None = None,
             min_iteration: int | None = None, max_iteration: int | None = None,
             since: datetime | None = None, status: str | None = None,
             limit: int = 100, offset: int = 0, newest_first: bool = False) -> list[dict]:
        where = filters.all_of(
            filters.eq_id("session_id", session_id) if session_id else None,
            filters.eq_id("agent_id", agent_id) if agent_id else None,
            filters.int_cmp("iteration", ">=", min_iteration) if min_iteration is not None else None,
            filters.int_cmp("iteration", "<=", max_iteration) if max_iteration is not None else None,
            filters.ts_cmp("created_at", ">=", since) if since is not None else None,
            filters.eq_word("status", status, STATUSES) if status else None,
        )
        up = not newest_first
        order = [("iteration", up), ("created_at", up), ("id", up)]
        return query.rows(self.table, self.name, where, order=order, limit=limit, offset=offset)

    def since_iteration(self, session_id: str, after: int, limit: int = 100) -> list[dict]:
        return self.search(session_id=session_id, min_iteration=after + 1, limit=limit)

    def latest(self, *, session_id: str | None = None, agent_id: str | None = None) -> dict | None:
        if not (session_id or agent_id):
            raise ValueError("latest() needs a session_id or an agent_id")
        # Within a session the highest iteration is the newest; across an agent's
        # sessions only time orders steps.
        if session_id:
            return query.first(self.table, self.name, filters.eq_id("session_id", session_id),
                               order=[("iteration", False), ("created_at", False)])
        return query.first(self.table, self.name, filters.eq_id("agent_id", agent_id),
                           order=[("created_at", False), ("iteration", False)])

    def delete_sessions(self, session_ids: list[str]) -> None:
        if session_ids:
            self.writer.delete(self.name, filters.in_ids("session_id", session_ids))

    def count(self, session_id: str | None = None) -> int:
        if session_id:
            return query.count(self.table, filters.eq_id("session_id", session_id))
        return query.count(self.table)
