"""summaries: one row per archived session or quiet conversation.

Rows are upserted by ``id`` ("session:<session_id>", "conversation:<id>"),
so summarising a session again (resumed after an error and finished anew) or a
conversation that woke up and went quiet again keeps one row, the newest.
"""
from concurrent.futures import Future

from store import codec, filters, query

KINDS = {"session", "conversation"}
METHODS = {"llm", "extractive"}


def summary_id(kind: str, subject_id: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}")
    return f"{kind}:{filters.check_id(subject_id, kind + '_id')}"


class SummaryTable:
    name = "summaries"
    key = "id"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def submit(self, row: dict) -> Future:
        if row.get("kind") not in KINDS or row.get("method") not in METHODS:
            raise ValueError("a summary needs a kind (session | conversation) and a method (llm | extractive)")
        subject = row["session_id"] if row["kind"] == "session" else row["conversation_id"]
        stored = {"created_at": codec.utcnow(), **row, "id": summary_id(row["kind"], subject)}
        return self.writer.submit_upsert(self.name, self.key, [stored])

    def save(self, row: dict) -> None:
        self.submit(row).result()

    def for_conversation(self, conversation_id: str) -> dict | None:
        where = filters.all_of(filters.eq_id("conversation_id", conversation_id),
                               filters.eq_word("kind", "conversation", KINDS))
        return query.first(self.table, self.name, where)

    def newest(self, *, agent_id: str | None = None, session_id: str | None = None,
             conversation_id: str | None = None, limit: int = 100, offset: int = 0) -> list[dict]:
        where = filters.all_of(
            filters.eq_id("agent_id", agent_id) if agent_id else None,
            filters.eq_id("session_id", session_id) if session_id else None,
            filters.eq_id("conversation_id", conversation_id) if conversation_id else None,
        )
        return query.rows(self.table, self.name, where, order=[("created_at", False), ("id", False)],
                          limit=limit, offset=offset)

    def existing(self, session_ids) -> set[str]:
        """Which of these sessions have a summary (for retention)."""
        session_ids = list(dict.fromkeys(session_ids))
        if not session_ids:
            return set()
        found = query.rows(self.table, self.name, filters.in_ids("session_id", session_ids),
                           columns=["session_id"], limit=len(session_ids) * 2)
        return {r["session_id"] for r in found}

    def delete_sessions(self, session_ids: list[str]) -> None:
        if session_ids:
            where = filters.all_of(filters.in_ids("session_id", session_ids),
                                   filters.eq_word("kind", "session", KINDS))
            self.writer.delete(self.name, where)
