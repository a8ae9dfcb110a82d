"""turns: one row per turn of a session (runtime/record/turn_tracker.py keeps them).

A row is upserted by ``id`` ("<session_id>:<turn>") twice in a turn's life:
when it starts (``status`` open, its trigger and first iteration) and when it
ends (``status`` ended, last iteration, usage, summary).  Nothing is written
per step.  Reads decode the JSON columns (``trigger_ids``, ``usage``,
``summary_data``).
"""
from concurrent.futures import Future

from store import codec, filters, query

STATUSES = {"open", "ended"}
TIMES = ("started_at", "ended_at", "updated_at")


def turn_id(session_id: str, turn: int) -> str:
    return f"{filters.check_id(session_id, 'session_id')}:{int(turn)}"


def _times(row: dict) -> dict:
    return codec.with_times(row, TIMES)


class TurnTable:
    name = "turns"
    key = "id"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def submit(self, row: dict) -> Future:
        """Queue insert-or-replace of a whole turn row; resolves once durable."""
        if row.get("status") not in STATUSES:
            raise ValueError(f"a turn's status must be one of {sorted(STATUSES)}")
        stored = _times({**row, "id": turn_id(row["session_id"], row["turn"]), "updated_at": codec.utcnow()})
        return self.writer.submit_upsert(self.name, self.key, [stored])

    def save(self, row: dict) -> None:
        self.submit(row).result()

    def latest(self, session_id: str) -> dict | None:
        """The session's newest turn."""
        return query.first(self.table, self.name, filters.eq_id("session_id", session_id),
                           order=[("turn", False)])

    def open_turns(self, session_id: str) -> list[dict]:
        """The session's turns not (yet durably) ended, oldest first: normally at most one."""
        where = filters.all_of(filters.eq_id("session_id", session_id), filters.eq_word("status", "open", STATUSES))
        return query.rows(self.table, self.name, where, order=[("turn", True)], limit=100)

    def page(self, session_id: str, *, limit: int = 100, offset: int = 0, newest_first: bool = False) -> list[dict]:
        return query.rows(self.table, self.name, filters.eq_id("session_id", session_id),
                          order=[("turn", not newest_first)], limit=limit, offset=offset)

    def count(self, session_id: str) -> int:
        return query.count(self.table, filters.eq_id("session_id", session_id))

    def delete_sessions(self, session_ids: list[str]) -> None:
        if session_ids:
            self.writer.delete(self.name, filters.in_ids("session_id", session_ids))
