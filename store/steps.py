"""agent_steps: append-only history, one row per iteration of a session.

A row's ``state`` is either the whole state or, when ``state_base`` is set, a
delta against the previous iteration's state (store/state_delta.py), so that
a growing state costs what changed rather than the whole state per step.
``state_base`` is the iteration of the row holding the whole state the run of
deltas starts from, and ``state_prev`` the id of the row the delta was made
against (so a delta is never applied to another row that took that row's
place).  Every read here hands back whole states: a delta is rebuilt from its
run (one more read of the rows it needs), and the two columns never leave
this module.  Rows written before the columns existed read as whole states
(state_base is null)."""
from domain.statuses import STEP_STATUSES
import logging
from concurrent.futures import Future
from datetime import datetime

from ulid import ULID

from store import codec, filters, query, state_delta, step_filters
from store.schemas import ITERATION_DIGITS, session_iteration

log = logging.getLogger("store.steps")

STATUSES = STEP_STATUSES
LAST_ITERATION = 10 ** ITERATION_DIGITS - 1
WINDOW_SLACK = 8  # rows read past a page's iterations, should a session ever hold a repeated one


class StepLog:
    name = "agent_steps"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer
        self.last_states = state_delta.LastStates()  # the bases of the next deltas (see submit)

    def append(self, step: dict) -> dict:
        row, committed = self.submit(step)
        committed.result()
        return row

    def submit(self, step: dict, guard=None, loop=None) -> tuple[dict, Future]:
        """Queue a step row for the next group commit: the row as it will be
        stored, and a future that resolves once it is durable (or raises
        ``store.writer.Fenced`` when ``guard()`` is false at commit time); an
        asyncio future of ``loop`` when the caller gives its event loop."""
        # Encoded once, here: the committer leaves a JSON column that is text
        # as it is, and the caller gets the row decoded from the same text.
        state = step.get("state")
        row = codec.encode(self.name, {"id": str(ULID()), "created_at": codec.utcnow(), **step})
        if type(state) not in (dict, list):  # stored as it always was (a string is not even JSON-encoded)
            self.last_states.forget([row["session_id"]])
            return codec.decode(self.name, row), self.writer.submit_append(self.name, [row], guard, loop)
        text = row["state"]
        written, chain = row, None
        if len(text) >= state_delta.MIN_STATE_BYTES:
            base = self.last_states.base(row["session_id"])
            found = state_delta.delta_for(base, row["id"], row["iteration"], state, text)
            if found:
                delta, chain = found
                written = {**row, "state": delta, "state_base": chain.base_iteration, "state_prev": base.row_id}
            else:
                chain = state_delta.Chain.whole(row["id"], row["iteration"], text)
        committed = self.writer.submit_append(self.name, [written], guard, loop)
        self.last_states.remember(row["session_id"], chain, committed, len(text))
        return codec.decode(self.name, row), committed

    def search(self, *, session_id: str | None = None, agent_id: str | None = None,
               min_iteration: int | None = None, max_iteration: int | None = None,
               since: datetime | None = None, status: str | None = None,
               limit: int = 100, offset: int = 0, newest_first: bool = False,
               last_iteration: int | None = None) -> list[dict]:
        """Steps matching every filter given, ordered by iteration (newest first if asked).

        A page of one session's steps is read as a range of iterations (see
        :meth:`session_page`), so its cost does not grow with the session's history.
        Other listings sort the rows that match their filters.
        """
        if session_id and since is None and status is None:
            return self.session_page(session_id, agent_id=agent_id, min_iteration=min_iteration,
                                     max_iteration=max_iteration, limit=limit, offset=offset,
                                     newest_first=newest_first, last_iteration=last_iteration)
        where, order = self._filtered(session_id, agent_id, min_iteration, max_iteration, since, status,
                                      newest_first)
        return self._with_states(query.rows(self.table, self.name, where, order=order, limit=limit, offset=offset))

    def matching(self, *, only: str | None = None, attempt_outcome: str | None = None,
                 session_id: str | None = None, agent_id: str | None = None,
                 min_iteration: int | None = None, max_iteration: int | None = None,
                 since: datetime | None = None, status: str | None = None, limit: int = 100, offset: int = 0,
                 newest_first: bool = False) -> tuple[list[dict], int]:
        """A page of the steps a timeline filter keeps (store/step_filters.py),
        ordered as :meth:`search` orders, and how many match in all.

        An exact filter is a column filter: LanceDB counts, sorts and pages it.
        The others are read in two passes: every candidate with only the columns
        the check needs (a session's 2,000 steps are a few kB of them), checked
        and paged here, then the page's rows whole; so a page is exact, whatever
        the column filter let through."""
        base, order = self._filtered(session_id, agent_id, min_iteration, max_iteration, since, status,
                                     newest_first)
        where = filters.all_of(base, step_filters.where(only, attempt_outcome))
        if step_filters.exact(only, attempt_outcome):
            found = query.rows(self.table, self.name, where, order=order, limit=limit, offset=offset)
            return self._with_states(found), query.count(self.table, where)
        candidates = query.rows(self.table, self.name, where, columns=step_filters.columns(only, attempt_outcome))
        kept = [row for row in candidates if step_filters.matches(row, only, attempt_outcome)]
        kept.sort(key=lambda r: (r["iteration"], r["created_at"], r["id"]), reverse=newest_first)
        ids = [row["id"] for row in kept[offset:offset + limit]]
        if not ids:
            return [], len(kept)
        rows = query.rows(self.table, self.name, filters.all_of(base, filters.in_ids("id", ids)),
                          limit=len(ids) + WINDOW_SLACK)
        place = {row_id: n for n, row_id in enumerate(ids)}
        rows = sorted((r for r in rows if r["id"] in place), key=lambda r: place[r["id"]])
        return self._with_states(rows), len(kept)

    def session_page(self, session_id: str, *, agent_id: str | None = None, min_iteration: int | None = None,
                     max_iteration: int | None = None, limit: int = 100, offset: int = 0,
                     newest_first: bool = False, last_iteration: int | None = None,
                     recent: bool = False) -> list[dict]:
        """One page of a session's steps, without sorting the session.

        A session's iterations have no gaps and no repeats (each is the step token of one step), so the
        page ``offset``..``offset + limit`` counted from ``min_iteration`` (or back
        from ``last_iteration``, newest first) *is* a range of iterations, and one
        range of the BTREE index on ``session_iteration`` finds exactly its rows
        (store/schemas.py), however long the session; only those are sorted,
        here.  Newest first needs the session's last iteration: its snapshot's,
        and the steps saved past it are looked up (the snapshot is saved behind
        the steps, runtime/session/agent.py; one read of their iterations).  ``recent``
        says the page lies at the session's newest end (a live catch-up): its
        rows are read from the whole table at once (see :meth:`_read_window`).
        """
        if newest_first:
            if last_iteration is None:
                raise ValueError("newest first needs the session's last iteration")
            if max_iteration is None or max_iteration > last_iteration:
                last_iteration = self._last_iteration_from(session_id, last_iteration)
            hi = last_iteration - offset
            if max_iteration is not None:
                hi = min(hi, max_iteration)
            lo = max(hi - limit + 1, min_iteration or 0, 0)
        else:
            lo = max(min_iteration or 0, 0) + offset
            hi = lo + limit - 1 if max_iteration is None else min(lo + limit - 1, max_iteration)
        hi = min(hi, LAST_ITERATION)  # no step lies past what the page key can hold
        if hi < lo:
            return []
        where = self._window(session_id, agent_id, lo, hi)
        settled = not recent and (last_iteration is None or hi < last_iteration)  # the newest step is fresh
        found = self._read_window(where, lo, hi, settled=settled)
        found.sort(key=lambda r: (r["iteration"], r["created_at"], r["id"]), reverse=newest_first)
        return self._with_states(found[:limit])

    def _last_iteration_from(self, session_id: str, known: int) -> int:
        """The session's newest iteration, given one it has reached (only the
        iterations past it are read, without their states)."""
        if known >= LAST_ITERATION:
            return known
        newest = query.rows(self.table, self.name, self._window(session_id, None, known + 1, LAST_ITERATION),
                            order=[("iteration", False)], limit=1, columns=["iteration"])
        return newest[0]["iteration"] if newest else known

    def _read_window(self, where: str, lo: int, hi: int, *, settled: bool) -> list[dict]:
        """The rows of iterations ``lo``..``hi``.  A ``settled`` window (not at the
        session's newest end, where rows are too fresh to be indexed) is read from
        the indexed rows first: iterations have no gaps, so when every one of
        them is there the answer is complete, and the small fragments of the
        latest commits are not scanned (store/query.py).  Otherwise, and when
        some are missing, the whole table is read."""
        slack = hi - lo + 1 + WINDOW_SLACK
        if settled:
            found = query.indexed_rows(self.table, self.name, where, limit=slack)
            if len({row["iteration"] for row in found}) == hi - lo + 1:
                return found
        return query.rows(self.table, self.name, where, limit=slack)

    def session_page_plan(self, session_id: str, lo: int, hi: int, analyze: bool = False,
                          indexed_only: bool = False) -> str:
        """The query plan of a page of iterations ``lo``..``hi`` (what a test checks
        for a sort), or with ``analyze`` the plan run, with the rows each part read;
        ``indexed_only``: the plan of the first read of a settled page."""
        return query.plan(self.table, self._window(session_id, None, lo, hi), limit=hi - lo + 1 + WINDOW_SLACK,
                          analyze=analyze, indexed_only=indexed_only)

    @staticmethod
    def _window(session_id: str, agent_id: str | None, lo: int, hi: int) -> str:
        """Iterations ``lo``..``hi`` of a session, as one range of its ``session_iteration`` keys
        (``lo`` at most ``LAST_ITERATION``: callers answer a range past it with nothing)."""
        filters.check_id(session_id, "session_id")
        lo, hi = max(lo, 0), min(hi, LAST_ITERATION)
        return filters.all_of(
            filters.between("session_iteration", session_iteration(session_id, lo), session_iteration(session_id, hi)),
            filters.eq_id("agent_id", agent_id) if agent_id else None)

    @staticmethod
    def _filtered(session_id, agent_id, min_iteration, max_iteration, since, status, newest_first):
        where = filters.all_of(
            filters.eq_id("session_id", session_id) if session_id else None,
            filters.eq_id("agent_id", agent_id) if agent_id else None,
            filters.int_cmp("iteration", ">=", min_iteration) if min_iteration is not None else None,
            filters.int_cmp("iteration", "<=", max_iteration) if max_iteration is not None else None,
            filters.ts_cmp("created_at", ">=", since) if since is not None else None,
            filters.eq_word("status", status, STATUSES) if status else None,
        )
        ascending = not newest_first
        return where, [("iteration", ascending), ("created_at", ascending), ("id", ascending)]

    def texts_at(self, places) -> dict[tuple[str, int], str | None]:
        """The text of each step ``(session_id, iteration)`` of ``places``, in one
        read (Needs you shows each approval with the step that asked for it)."""
        places = sorted(set(places))
        if not places:
            return {}
        where = filters.any_of(*(self._window(sid, None, it, it) for sid, it in places))
        found = query.rows(self.table, self.name, where, limit=len(places) + WINDOW_SLACK,
                           columns=("session_id", "iteration", "text"))
        return {(r["session_id"], r["iteration"]): r["text"] for r in found}

    TIMING_COLUMNS = ("id", "iteration", "created_at", "latency_ms", "status", "error", "usage")

    def timings(self, session_id: str, lo: int, hi: int) -> list[dict]:
        """Iterations ``lo``..``hi`` of a session with only what a trace draws
        (when each step ended, how long it took, its status and model usage),
        by iteration: no state is read or rebuilt, so a window of 500 steps
        costs their usage columns, not their states."""
        hi = min(hi, LAST_ITERATION)
        if hi < lo:
            return []
        found = query.rows(self.table, self.name, self._window(session_id, None, lo, hi),
                           limit=hi - lo + 1 + WINDOW_SLACK, columns=self.TIMING_COLUMNS)
        found.sort(key=lambda r: (r["iteration"], r["created_at"], r["id"]))
        return found

    def since_iteration(self, session_id: str, after: int, limit: int = 100) -> list[dict]:
        """The steps after iteration ``after`` (a live catch-up: the newest rows)."""
        return self.session_page(session_id, min_iteration=after + 1, limit=limit, recent=True)

    def latest(self, *, session_id: str | None = None, agent_id: str | None = None,
               after_iteration: int | None = None) -> dict | None:
        """The newest step of a session (past ``after_iteration``, when the caller
        knows roughly where it is, which spares sorting the session) or of an agent."""
        if not (session_id or agent_id):
            raise ValueError("latest() needs a session_id or an agent_id")
        # Within a session the highest iteration is the newest; across an agent's
        # sessions only time orders steps.
        if session_id:
            if after_iteration is not None and after_iteration >= LAST_ITERATION:
                return None
            where = (self._window(session_id, None, max(after_iteration + 1, 0), LAST_ITERATION)
                     if after_iteration is not None else filters.eq_id("session_id", session_id))
            found = query.first(self.table, self.name, where, order=[("iteration", False), ("created_at", False)])
        else:
            found = query.first(self.table, self.name, filters.eq_id("agent_id", agent_id),
                                order=[("created_at", False), ("iteration", False)])
        return self._with_states([found])[0] if found else None

    def after_many(self, iterations: dict[str, int]) -> dict[str, list[dict]]:
        """The newer steps of many sessions in one query: for each session id of
        ``iterations``, its steps past the iteration given, ascending (an
        adoption's chunk: each snapshot's iteration).  One range of the
        ``session_iteration`` keys per session, OR-ed, so the read stays on the
        index however long the sessions' histories are."""
        found: dict[str, list[dict]] = {sid: [] for sid in iterations}
        windows = [self._window(sid, None, max(after + 1, 0), LAST_ITERATION)
                   for sid, after in iterations.items() if after < LAST_ITERATION]
        if not windows:
            return found
        for row in self._with_states(query.rows(self.table, self.name, filters.any_of(*windows))):
            found[row["session_id"]].append(row)
        for rows in found.values():
            rows.sort(key=lambda r: (r["iteration"], r["created_at"], r["id"]))
        return found

    # ---- whole states from deltas ------------------------------------------------

    def _with_states(self, rows: list[dict]) -> list[dict]:
        """``rows`` with whole states: each delta is rebuilt from its run of rows,
        read in one query for all of them (the rows in hand are not read again).
        Rows of one answer may share the parts of their states that did not
        change between them: read them, do not change them in place."""
        bases = [(row.pop("state_base", None), row.pop("state_prev", None)) for row in rows]
        chained = [(row, base) for row, (base, _) in zip(rows, bases) if base is not None]
        if not chained:
            return rows
        in_hand = {(row["session_id"], row["iteration"]): (row["id"], base, prev, row["state"])
                   for row, (base, prev) in zip(rows, bases)}
        runs = _runs(chained)
        stored = self._chain_rows(runs, in_hand)
        for session_id, first, last in runs:
            states = state_delta.rebuild(stored.get(session_id, {}), first, last)
            for row, _ in chained:
                if row["session_id"] == session_id and first <= row["iteration"] <= last:
                    row["state"] = states.get(row["iteration"], state_delta.MISSING)
        for row, _ in chained:
            if row["state"] is state_delta.MISSING:  # never written so: a delta's base is durable before it
                log.error("step %d of session %s: the rows its state is rebuilt from are missing",
                          row["iteration"], row["session_id"])
                row["state"] = None
        return rows

    def _chain_rows(self, runs, in_hand: dict) -> dict[str, dict]:
        """``{session_id: {iteration: (id, state_base, state_prev, state)}}`` over the
        runs: the rows in hand, and the others read (only the columns a rebuild needs)."""
        stored: dict[str, dict] = {}
        windows, wanted = [], 0
        for session_id, first, last in runs:
            missing = [i for i in range(first, last + 1) if (session_id, i) not in in_hand]
            for lo, hi in _spans(missing):
                windows.append(self._window(session_id, None, lo, hi))
                wanted += hi - lo + 1
            for i in range(first, last + 1):
                if (session_id, i) in in_hand:
                    stored.setdefault(session_id, {})[i] = in_hand[session_id, i]
        if windows:
            for row in query.rows(self.table, self.name, filters.any_of(*windows), limit=wanted + WINDOW_SLACK,
                                  columns=["id", "session_id", "iteration", "state", "state_base", "state_prev"]):
                stored.setdefault(row["session_id"], {})[row["iteration"]] = (
                    row["id"], row["state_base"], row["state_prev"], row["state"])
        return stored

    def delete_sessions(self, session_ids: list[str]) -> None:
        self.last_states.forget(session_ids)
        if session_ids:
            self.writer.delete(self.name, filters.in_ids("session_id", session_ids))

    def count(self, session_id: str | None = None) -> int:
        if session_id:
            return query.count(self.table, filters.eq_id("session_id", session_id))
        return query.count(self.table)


def _spans(iterations: list[int]) -> list[tuple[int, int]]:
    """Sorted iterations as runs of consecutive ones, ``(first, last)``."""
    spans: list[tuple[int, int]] = []
    for i in iterations:
        if spans and spans[-1][1] == i - 1:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
    return spans


def _runs(chained: list[tuple[dict, int]]) -> list[tuple[str, int, int]]:
    """The iterations the deltas of ``chained`` (rows and their bases) are rebuilt
    from, as runs ``(session_id, base, last)``, overlapping ones merged."""
    spans: dict[str, list[list[int]]] = {}
    for row, base in sorted(chained, key=lambda pair: (pair[0]["session_id"], pair[1])):
        session = spans.setdefault(row["session_id"], [])
        if session and base <= session[-1][1] + 1:
            session[-1][1] = max(session[-1][1], row["iteration"])
        else:
            session.append([base, row["iteration"]])
    return [(session_id, lo, hi) for session_id, session in spans.items() for lo, hi in session]
