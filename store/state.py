"""agent_state: the latest snapshot of each agent session, one row per session_id."""
from domain.events import NOT_SUMMARISED
from domain.statuses import SESSION_FINISHED, SESSION_STATUSES
from concurrent.futures import Future
from datetime import datetime, timezone

from store import codec, filters, query
from store.schemas import AGENT_STATE

STATUSES = SESSION_STATUSES
FINISHED = tuple(sorted(SESSION_FINISHED))
LIST_COLUMNS = ["session_id", "agent_id", "created_at", "updated_at", "status", "moniker", "name", "task"]
# A session list's rows (GET /api/agents, …/sessions): every column but the config, the
# state and the guidance lists, which can be large and which only one session's GET carries
# (issue 37: ~190 KB configs made a page of agents 2-5 MB).
SUMMARY_COLUMNS = [name for name in AGENT_STATE.names if name not in (*NOT_SUMMARISED, "state")]
# sort name -> (key, descending); every key ends in agent_id so equal values keep one order
AGENT_SORTS = {
    "newest": (lambda r: (r["created_at"] or "", r["agent_id"]), True),
    "oldest": (lambda r: (r["created_at"] or "", r["agent_id"]), False),
    "updated": (lambda r: (r["updated_at"] or "", r["agent_id"]), True),
    "name": (lambda r: (r.get("name") is None, (r.get("name") or "").casefold(), r["agent_id"]), False),
}


def _matches(row: dict, moniker: str | None, text: str | None) -> bool:
    """The moniker and text filters, on already-read values (no filter string)."""
    if moniker and row["moniker"] != moniker:
        return False
    if text:
        needle = text.casefold()
        return any(needle in (row.get(k) or "").casefold() for k in ("name", "task", "agent_id", "session_id"))
    return True
def _config_matches(config, profile: str | None, model: str | None) -> bool:
    """A session config's profile name and LLM model, against the filters given."""
    def part(key: str) -> dict:
        value = config.get(key) if isinstance(config, dict) else None
        return value if isinstance(value, dict) else {}
    if profile is not None and part("profile").get("name") != profile:
        return False
    return model is None or part("llm").get("model") == model


RESUMABLE = ("running", "waiting", "paused", "stopping")
RESUMABLE_CHUNK = 500  # ids in one filter of the second read
TIME_COLUMNS = ("created_at", "updated_at", "status_changed_at", "step_started_at", "heartbeat_at")


def _at(when) -> str:
    """``updated_at`` equal to ``when`` (to the microsecond)."""
    return filters.all_of(filters.ts_cmp("updated_at", ">=", when), filters.ts_cmp("updated_at", "<=", when))


def _unchanged_since_read(rows: list[dict]) -> str:
    """Rows still as they were read: the same owner and an ``updated_at`` among
    the times read (one clause per owner read; a row read without a time, which
    no store read gives, is guarded by its owner alone)."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row.get("owner"), row.get("updated_at") is not None), []).append(row)
    clauses = []
    for (owner, timed), group in groups.items():
        times = sorted({codec.parse_time(r["updated_at"]) for r in group}) if timed else []
        clauses.append(filters.all_of(
            filters.in_ids("session_id", [r["session_id"] for r in group]),
            "owner IS NULL" if owner is None else filters.eq_id("owner", owner),
            filters.any_of(*(_at(t) for t in times))))
    return filters.any_of(*clauses)


class StateTable:
    name = "agent_state"
    key = "session_id"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer

    def save(self, snapshot: dict) -> None:
        self.submit(snapshot).result()

    def submit(self, snapshot: dict, loop=None) -> Future:
        """Queue insert-or-replace of the snapshot of ``snapshot['session_id']``
        (merge_insert on the declared primary key, never an overwrite of the
        table); the future resolves once it is durable, to True when some row
        of its commit was refused because another worker owns that session
        (store/writer.py UPSERT_CONDITIONS: the caller then checks its own).
        An asyncio future of ``loop`` when the caller gives its event loop."""
        row = {k: codec.parse_time(v) if k in TIME_COLUMNS else v for k, v in snapshot.items()}  # a read row saved again
        row["updated_at"] = codec.utcnow()
        return self.writer.submit_upsert(self.name, self.key, [row], loop=loop)

    def get(self, session_id: str) -> dict | None:
        return query.first(self.table, self.name, filters.eq_id("session_id", session_id))

    OWNERSHIP = ("session_id", "agent_id", "status", "owner")

    def get_many(self, session_ids, columns=OWNERSHIP) -> dict[str, dict]:
        """Owner and status (or the ``columns`` asked for) of several sessions in one query."""
        session_ids = list(dict.fromkeys(session_ids))
        if not session_ids:
            return {}
        found = query.rows(self.table, self.name, filters.in_ids("session_id", session_ids),
                           columns=list(columns), limit=len(session_ids))
        return {r["session_id"]: r for r in found}

    def latest_for_agent(self, agent_id: str) -> dict | None:
        return query.first(self.table, self.name, filters.eq_id("agent_id", agent_id),
                           order=[("created_at", False), ("session_id", False)])

    def sessions_for_agent(self, agent_id: str, limit: int = 100, offset: int = 0, columns=None) -> list[dict]:
        """The agent's sessions, newest first (``columns``: only those, e.g. SUMMARY_COLUMNS)."""
        return query.rows(self.table, self.name, filters.eq_id("agent_id", agent_id),
                          order=[("created_at", False), ("session_id", False)], limit=limit, offset=offset,
                          columns=columns)

    def session_ids_of_moniker(self, moniker: str, limit: int = 5000) -> list[str]:
        """The newest ``limit`` sessions running ``moniker`` (a search filter)."""
        found = query.rows(self.table, self.name, filters.eq_id("moniker", moniker), columns=["session_id"],
                           order=[("created_at", False)], limit=limit)
        return [r["session_id"] for r in found]

    def agents(self, *, status: str | None = None, moniker: str | None = None, text: str | None = None,
               sort: str = "newest", limit: int = 100, offset: int = 0, columns=SUMMARY_COLUMNS) -> dict:
        """One page of agents, each with its latest session's snapshot.

        Filters apply to the latest session (an agent whose old session failed
        but whose new one runs is running), so they are applied after picking
        each agent's latest session, on a narrow read of a few columns; only
        the page's rows are then read (``columns`` of them: all but the big
        ones, unless asked; None: whole).  Every order ends in agent_id, so
        the order is the same on every read.  Returns ``{agents, total,
        counts}``: ``counts`` per status over the moniker and text filters.
        """
        if sort not in AGENT_SORTS:
            raise ValueError(f"sort must be one of {sorted(AGENT_SORTS)}")
        rows = [r for r in self._latest_per_agent(None) if _matches(r, moniker, text)]
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        if status:
            rows = [r for r in rows if r["status"] == status]
        rows.sort(key=AGENT_SORTS[sort][0], reverse=AGENT_SORTS[sort][1])
        page = [r["session_id"] for r in rows[offset:offset + limit]]
        full = {r["session_id"]: r for r in query.rows(self.table, self.name, filters.in_ids("session_id", page),
                                                       limit=len(page), columns=columns)} if page else {}
        return {"agents": [full[s] for s in page if s in full], "total": len(rows), "counts": counts}

    def _latest_per_agent(self, where: str | None) -> list[dict]:
        """Each agent's latest session (the newest created, ties broken by
        session_id) among the rows ``where`` keeps, as narrow rows (``LIST_COLUMNS``)."""
        latest: dict[str, dict] = {}
        for row in query.rows(self.table, self.name, where, columns=LIST_COLUMNS,
                              order=[("created_at", False), ("session_id", False)]):
            latest.setdefault(row["agent_id"], row)
        return list(latest.values())

    def latest_matching(self, *, status: str | None = None, moniker: str | None = None, text: str | None = None,
                        agent_ids=None, profile: str | None = None, model: str | None = None) -> list[dict]:
        """Every agent's latest session, picked as :meth:`agents` picks it, that
        matches all the filters given: narrow rows (``LIST_COLUMNS``), oldest
        first.  For bulk controls (api/routes/bulk.py).  ``agent_ids`` narrows
        the read itself; ``profile`` and ``model`` are compared with the config's
        ``profile.name`` and ``llm.model``, read only for the sessions the other
        filters kept (in Python: neither ever reaches a filter string)."""
        if agent_ids is not None and not agent_ids:
            return []
        where = filters.in_ids("agent_id", agent_ids) if agent_ids is not None else None
        rows = [r for r in self._latest_per_agent(where)
                if _matches(r, moniker, text) and (not status or r["status"] == status)]
        if profile is not None or model is not None:
            configs = {}
            for at in range(0, len(rows), 500):
                chunk = [r["session_id"] for r in rows[at:at + 500]]
                configs.update({sid: r.get("config") for sid, r in
                                self.get_many(chunk, columns=("session_id", "config")).items()})
            rows = [r for r in rows if _config_matches(configs.get(r["session_id"]), profile, model)]
        rows.sort(key=AGENT_SORTS["oldest"][0])
        return rows

    def adopt(self, session_id: str, new_owner: str, expected_owner: str | None,
              expected_updated_at=None) -> bool:
        """Take one session over from ``expected_owner``: :meth:`adopt_many` of one."""
        read = {"session_id": session_id, "owner": expected_owner, "updated_at": expected_updated_at}
        return session_id in self.adopt_many([read], new_owner)

    def adopt_many(self, snapshots, new_owner: str) -> set[str]:
        """Take sessions over from the owners they had when read (dead workers, or
        nobody); the ids of those ``new_owner`` now holds.

        ``snapshots`` are rows as the adopter read them (``session_id``,
        ``owner``, ``updated_at``).  One conditional update for all: a row is
        taken only if its owner is still the one read, so of several workers
        racing to adopt the same sessions exactly one finds itself as the owner
        of each when it reads back.  The update also fails for a row changed
        since it was read: the old owner saved it or reasserted it
        (:meth:`reassert`), i.e. it was slow, not dead.  That guard is the row's
        ``updated_at`` being one of the times read: a change stamps a time later
        than the read (one per-row pair of conditions costs ~2.5x as much for
        the same answer).  A read-back names the rows won only when some were not.
        """
        rows = list({r["session_id"]: r for r in snapshots}.values())
        if not rows:
            return set()
        owner = filters.check_id(new_owner, "owner")
        ids = [r["session_id"] for r in rows]
        if self.writer.update(self.name, _unchanged_since_read(rows), {"owner": owner}) == len(ids):
            return set(ids)
        return {sid for sid, row in self.get_many(ids).items() if row.get("owner") == owner}

    def reassert(self, session_ids, owner: str) -> set[str]:
        """Of ``session_ids``, the ones ``owner`` still holds, made to last.

        One conditional update touches ``updated_at`` of the rows still owned by
        ``owner``, so that an adoption which read them before (and so expects
        the old ``updated_at``) fails; a read-back names the rows it matched only
        when some were not (adopted meanwhile).  A worker calls this after it
        may have been taken for dead (runtime/base/fence.py)."""
        session_ids = list(dict.fromkeys(session_ids))
        if not session_ids:
            return set()
        where = filters.all_of(filters.in_ids("session_id", session_ids), filters.eq_id("owner", owner))
        if self.writer.update_sql(self.name, where, {"updated_at": "now()"}) == len(session_ids):
            return set(session_ids)
        return {sid for sid, row in self.get_many(session_ids).items() if row.get("owner") == owner}

    def finished_before(self, when, limit: int = 500) -> list[dict]:
        """Finished sessions whose status last changed before ``when`` (for retention)."""
        where = filters.all_of(filters.in_words("status", FINISHED, STATUSES),
                               filters.ts_cmp("status_changed_at", "<", when))
        return query.rows(self.table, self.name, where, columns=["session_id", "agent_id"], limit=limit)

    def finished_since(self, when, limit: int = 500) -> list[dict]:
        """Finished sessions whose status changed at or after ``when`` (the archive's catch-up)."""
        where = filters.all_of(filters.in_words("status", FINISHED, STATUSES),
                               filters.ts_cmp("status_changed_at", ">=", when))
        return query.rows(self.table, self.name, where, order=[("status_changed_at", True)], limit=limit)

    # ---- sub-agent trees (runtime/session/child_sessions.py) ----------------------------

    def children(self, parent_session_id: str, limit: int = 1000) -> list[dict]:
        """The direct children of a session, oldest first."""
        return query.rows(self.table, self.name, filters.eq_id("parent_session_id", parent_session_id),
                          order=[("created_at", True), ("session_id", True)], limit=limit)

    def tree(self, root_session_id: str, limit: int = 10_000) -> list[dict]:
        """A whole tree: its root and every session whose root it is, oldest first."""
        where = filters.any_of(filters.eq_id("session_id", root_session_id),
                               filters.eq_id("root_session_id", root_session_id))
        return query.rows(self.table, self.name, where, order=[("created_at", True), ("session_id", True)],
                          limit=limit)

    def unreported_outcomes(self, limit: int = 500) -> list[dict]:
        """Finished children whose latest outcome was never queued for their parent
        (a crash between finishing and reporting, or a path that bypassed the report)."""
        where = filters.all_of("parent_session_id IS NOT NULL",
                               filters.in_words("status", FINISHED, STATUSES),
                               "COALESCE(reported_generation, 0) < COALESCE(generation, 1)")
        return query.rows(self.table, self.name, where, order=[("status_changed_at", True)], limit=limit)

    def done_with_child_results(self, limit: int = 500) -> list[dict]:
        """Sessions that finished ``done`` still holding a child's result in their
        inbox: the runner wakes such a session right after saving its end, and a
        crash in between leaves it so (runtime/session/child_sessions.py ``wake_left_done``)."""
        where = filters.all_of(filters.eq_word("status", "done", STATUSES),
                               "pending_guidance LIKE '%\"kind\":\"child_result\"%'")  # a constant: the codec's JSON
        return query.rows(self.table, self.name, where, order=[("status_changed_at", True)], limit=limit)

    def delete_sessions(self, session_ids: list[str]) -> None:
        if session_ids:
            self.writer.delete(self.name, filters.in_ids("session_id", session_ids))

    def resumable(self, skip_owners=(), skip_sessions=frozenset()) -> list[dict]:
        """Sessions that should be running, paused or stopping, oldest first,
        except those of ``skip_owners`` (live workers: an adoption round reads
        only orphans) and the ids in ``skip_sessions`` (those the caller runs).

        Read in two steps: the ids first, then the whole rows of the ids left.
        An adoption round every few seconds read, and decoded, the whole row of
        every session its own worker was running (4.5 % of the event loop's time
        at 1,000 agents stepping)."""
        skip = [filters.check_id(o, "owner") for o in skip_owners if o]
        where = filters.in_words("status", RESUMABLE, STATUSES)
        if skip:
            where = filters.all_of(where, f"(owner IS NULL OR NOT ({filters.in_ids('owner', skip)}))")
        if not skip_sessions:
            return query.rows(self.table, self.name, where, order=[("created_at", True)])
        ids = [r["session_id"] for r in query.rows(self.table, self.name, where, columns=["session_id"])
               if r["session_id"] not in skip_sessions]
        found = []
        for i in range(0, len(ids), RESUMABLE_CHUNK):
            chunk = filters.all_of(where, filters.in_ids("session_id", ids[i:i + RESUMABLE_CHUNK]))
            found += query.rows(self.table, self.name, chunk)
        return sorted(found, key=_created)


def _created(row: dict) -> datetime:
    """A row's created_at as a time (decoded rows hold ISO text, which does not
    sort as times when one has no fraction of a second)."""
    value = row.get("created_at")
    return codec.parse_time(value) if value else datetime.min.replace(tzinfo=timezone.utc)
