"""model_io: what a model was sent and what it answered, for the last steps of
each session ("what the model saw" on a step of the dashboard).

One row per model call of a step (a step that re-asks makes several): the
request as sent (its messages, the output schema or grammar, the sampling
options; never the headers, which carry the endpoint's key), the reply as
received, and how the prompt's tokens split between its parts.  The rows are
bulky (a prompt is kilobytes) and wanted only for the recent past, so a
session keeps the calls of its last N steps (the worker's
``--keep-model-io``): older ones are deleted as new ones come
(runtime/record/model_io.py), and all of them go with the session when
retention removes it.  A private session (config ``private``) has none.
"""
from store import codec, filters, query

TIMES = ("created_at",)


def row_id(session_id: str, iteration: int, ask: int) -> str:
    return f"{filters.check_id(session_id, 'session_id')}:{int(iteration)}:{int(ask)}"


class ModelIOTable:
    name = "model_io"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def append(self, rows: list[dict]) -> None:
        """Append the calls of one step (durable on return)."""
        if rows:
            stamped = [codec.with_times({**r, "id": row_id(r["session_id"], r["iteration"], r["ask"]),
                                         "created_at": r.get("created_at") or codec.utcnow()}, TIMES)
                       for r in rows]
            self.writer.append(self.name, stamped)

    def of_step(self, session_id: str, iteration: int) -> list[dict]:
        """The calls of one step, in the order they were made."""
        where = filters.all_of(filters.eq_id("session_id", session_id), filters.int_cmp("iteration", "=", iteration))
        return query.rows(self.table, self.name, where, order=[("ask", True)], limit=100)

    def kept_range(self, session_id: str) -> tuple[int, int] | None:
        """The first and last iteration the session still has calls of."""
        where = filters.eq_id("session_id", session_id)
        first = query.first(self.table, self.name, where, order=[("iteration", True)])
        last = query.first(self.table, self.name, where, order=[("iteration", False)])
        return (first["iteration"], last["iteration"]) if first and last else None

    def prune(self, session_id: str, below_iteration: int) -> None:
        """Forget the session's calls of steps before ``below_iteration``."""
        self.writer.delete(self.name, filters.all_of(filters.eq_id("session_id", session_id),
                                                     filters.int_cmp("iteration", "<", below_iteration)))

    def count(self, session_id: str | None = None) -> int:
        return query.count(self.table, filters.eq_id("session_id", session_id) if session_id else None)

    def delete_sessions(self, session_ids: list[str]) -> None:
        if session_ids:
            self.writer.delete(self.name, filters.in_ids("session_id", session_ids))
