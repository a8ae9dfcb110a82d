"""tool_calls: one row per tool call a step asked for (StepFrame-v1).

A row is written once the step that made it is durable (when and in which
status: runtime/session/tool_runner.py), appended the first time and rewritten whole at
each later change of status by the worker that owns the session (an upsert on
the declared primary key ``id``; app.py never writes here, it queues actions).  Reads decode the JSON
columns (``args``, ``result``, ``usage``).
"""
from concurrent.futures import Future
from datetime import datetime

from domain.statuses import TOOL_CALL_ENDED, TOOL_CALL_STATUSES, TOOL_CALL_WAITING
from store import codec, filters, query

STATUSES = TOOL_CALL_STATUSES
WAITING = tuple(sorted(TOOL_CALL_WAITING))
ENDED = tuple(sorted(TOOL_CALL_ENDED))


TIMES = ("created_at", "updated_at", "started_at", "finished_at")


def _times(row: dict) -> dict:
    return codec.with_times(row, TIMES)


class ToolCallTable:
    name = "tool_calls"
    key = "id"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def submit(self, rows: list[dict], new: bool = False, guard=None) -> Future:
        """Queue insert-or-replace of whole rows; the future resolves once durable.
        ``new``: the caller knows no row of these calls exists yet, so they are
        appended (an append costs about half a merge_insert, which joins on the
        key, and does not grow with the table); ``guard`` as for any append
        (store/writer.py)."""
        now = codec.utcnow()
        rows = [_times(dict(r, updated_at=r["updated_at"] if isinstance(r.get("updated_at"), datetime) else now))
                for r in rows]  # the writer's own time of the change, when it gives one (live events carry it)
        if new:
            return self.writer.submit_append(self.name, rows, guard)
        return self.writer.submit_upsert(self.name, self.key, rows)

    def save(self, rows: list[dict]) -> None:
        self.submit(rows).result()

    def get(self, tool_call_id: str) -> dict | None:
        return query.first(self.table, self.name, filters.eq_id("id", tool_call_id))

    def of_step(self, session_id: str, iteration: int) -> list[dict]:
        """The calls one step made, in call order."""
        where = filters.all_of(filters.eq_id("session_id", session_id), filters.int_cmp("iteration", "=", iteration))
        return query.rows(self.table, self.name, where, order=[("seq", True)])

    def of_steps(self, session_id: str, first: int, last: int, limit: int = 10_000) -> list[dict]:
        """The calls the steps ``first``..``last`` made, by iteration then call order (a diff's read)."""
        where = filters.all_of(filters.eq_id("session_id", session_id), filters.int_cmp("iteration", ">=", first),
                               filters.int_cmp("iteration", "<=", last))
        return query.rows(self.table, self.name, where, order=[("iteration", True), ("seq", True)], limit=limit)

    def iterations_of(self, tool_call_ids) -> dict[str, int]:
        """The iteration of the step that made each call of ``tool_call_ids`` (a
        sub-agent's session id is its ``spawn_agent`` call's id: where a trace
        nests it), in one read of two columns."""
        ids = sorted(set(tool_call_ids))
        if not ids:
            return {}
        found = query.rows(self.table, self.name, filters.in_ids("id", ids), limit=len(ids),
                           columns=("id", "iteration"))
        return {r["id"]: r["iteration"] for r in found}

    def search(self, *, session_id: str | None = None, agent_id: str | None = None, name: str | None = None,
               status: str | None = None, since: datetime | None = None, limit: int = 100,
               offset: int = 0) -> list[dict]:
        """In the order they were made (created_at, then call order); a tool name
        is matched like an id (names are ``[A-Za-z0-9][A-Za-z0-9_.:-]*``)."""
        where = filters.all_of(
            filters.eq_id("session_id", session_id) if session_id else None,
            filters.eq_id("agent_id", agent_id) if agent_id else None,
            filters.eq_id("name", name) if name else None,
            filters.eq_word("status", status, STATUSES) if status else None,
            filters.ts_cmp("created_at", ">=", since) if since is not None else None,
        )
        order = [("created_at", True), ("iteration", True), ("seq", True), ("id", True)]
        return query.rows(self.table, self.name, where, order=order, limit=limit, offset=offset)

    # ---- what waits on a person (GET /api/waiting) ----------------------

    WAIT_KINDS = ("question", "approval", "result")
    QUESTION_TOOL = "ask_user"

    def _waiting_where(self, kind: str | None, agent_id: str | None, session_id: str | None,
                       tool: str | None = None, ids=None) -> str:
        """question: an ask_user call waiting for its answer; approval: any call
        waiting for a yes; result: another external call waiting for its result.
        ``tool`` keeps the calls of one tool, ``ids`` those of these call ids."""
        question = filters.eq_id("name", self.QUESTION_TOOL)
        by_kind = {
            "question": filters.all_of(filters.eq_word("status", "waiting_result", STATUSES), question),
            "approval": filters.eq_word("status", "waiting_approval", STATUSES),
            "result": filters.all_of(filters.eq_word("status", "waiting_result", STATUSES), filters.negate(question)),
        }
        return filters.all_of(
            by_kind[kind] if kind else filters.in_words("status", WAITING, STATUSES),
            filters.eq_id("agent_id", agent_id) if agent_id else None,
            filters.eq_id("session_id", session_id) if session_id else None,
            filters.eq_id("name", tool) if tool else None,
            filters.in_ids("id", ids) if ids else None)

    def waiting(self, *, kind: str | None = None, agent_id: str | None = None, session_id: str | None = None,
                tool: str | None = None, ids=None, limit: int = 100, offset: int = 0) -> list[dict]:
        """Calls waiting on a person, oldest first."""
        order = [("created_at", True), ("iteration", True), ("seq", True), ("id", True)]
        return query.rows(self.table, self.name, self._waiting_where(kind, agent_id, session_id, tool, ids),
                          order=order, limit=limit, offset=offset)

    def count_waiting(self, *, kind: str | None = None, agent_id: str | None = None,
                      session_id: str | None = None, tool: str | None = None, ids=None) -> int:
        return query.count(self.table, self._waiting_where(kind, agent_id, session_id, tool, ids))

    def waiting_brief(self, *, kind: str | None = None, agent_id: str | None = None,
                      session_id: str | None = None, tool: str | None = None, ids=None,
                      cap: int = 10_000) -> list[dict]:
        """The name and status of (at most ``cap``) calls waiting on a person, for
        counting them by tool and kind (Needs you's filters): two narrow columns."""
        return query.rows(self.table, self.name, self._waiting_where(kind, agent_id, session_id, tool, ids),
                          limit=cap, columns=["name", "status"])

    def open_among(self, tool_call_ids: list[str]) -> list[dict]:
        """Those of these calls that are questions still waiting, oldest first."""
        if not tool_call_ids:
            return []
        where = filters.all_of(self._waiting_where("question", None, None), filters.in_ids("id", tool_call_ids))
        return query.rows(self.table, self.name, where, order=[("created_at", True), ("seq", True)],
                          limit=len(tool_call_ids))

    def open_questions(self, session_id: str | None = None, limit: int = 1000) -> list[dict]:
        """ask_user calls still waiting for an answer (of one session), oldest first."""
        return self.waiting(kind="question", session_id=session_id, limit=limit)

    def count(self, status: str | None = None) -> int:
        return query.count(self.table, filters.eq_word("status", status, STATUSES) if status else None)

    def delete_sessions(self, session_ids: list[str]) -> None:
        if session_ids:
            self.writer.delete(self.name, filters.in_ids("session_id", session_ids))
