"""The action queue: control requests appended by app.py, applied by agents.py.

Life of an action: ``pending`` when appended, ``processing`` once a worker
claims it (with a lease), then ``done`` or ``failed``.  Rows are only ever
updated, never deleted, so the queue doubles as an audit log.

Claiming an action is not trying it.  A worker claims a batch, but a session's
lane applies its actions one at a time, and a worker that dies takes the
untried rest of its batch down with it.  So ``attempts`` counts the times the
action's *handler started* (:meth:`ActionQueue.start_attempt`, or the claim
itself for an action whose handler starts the moment it is claimed), and each
start is durable before the handler can have any effect: a handler that kills
its process is counted, and parked after a few tries instead of killing every
worker that picks it up (runtime/dispatch/dispatcher.py).

While an action is unfinished, ``error`` holds the record of its attempts,
one line each: ``started by <worker> at <time>`` (``started alone by ...`` for
an attempt that ran with no other handler beside it), followed by a line
``raised <what>`` when that attempt's handler raised.  On a pending action an
attempt with no ``raised`` line is one whose worker died before it ended.
When the action ends, ``error`` becomes its failure's reason (or null when it
is done).  :func:`attempt_record` reads the record, :func:`counts` says which
attempts count towards parking, and :func:`describe_attempts` words the record
for a parked action's error.

Why "alone": a worker that dies takes every handler it was running with it,
so a death during an attempt says nothing about that action when others ran
beside it (a handler that kills the process, or an operator's kill, cuts them
all).  So an action whose worker died during one of its attempts is tried
next time alone, and only attempts that ran alone, or that raised, count.
"""
from domain.statuses import ACTION_STATUSES
import os
from datetime import datetime, timedelta

from ulid import ULID

from store import codec, filters, query
from store.watch import watch_commits

TYPES = {"create", "pause", "resume", "interrupt", "destroy", "tool_approve", "tool_deny", "tool_result",
         "child_result", "child_message",  # sub-agents (runtime/session/child_sessions.py)
         "wake",  # a parent a crash left done with children's results unread (runtime/dispatch/child_controls.py)
         "answer", "inbox_item"}  # inbox_item (runtime/dispatch/handlers.py) and wake: internal, not offered over HTTP
STATUSES = ACTION_STATUSES
MAX_REQUEST_ROWS = 1000  # one request queues at most this many actions (a bulk control's cap)
PENDING = filters.eq_word("status", "pending", STATUSES)
PROCESSING = filters.eq_word("status", "processing", STATUSES)
STARTED = "started "  # how a line of the attempt record begins (see the module docstring)
ALONE = "started alone "


def started_text(worker_id: str, alone: bool = False) -> str:
    """The start of an attempt's line, up to its time."""
    return f"{ALONE if alone else STARTED}by {filters.check_id(worker_id, 'worker_id')} at "


def _started_line(worker_id: str, alone: bool = False) -> str:
    """SQL appending one ``started ...`` line to the attempt record: the same
    expression for every action of a worker, so starts share a commit."""
    return f"concat(coalesce(error, ''), {filters.quote(started_text(worker_id, alone))}, CAST(now() AS VARCHAR), '\n')"


def counts(attempt: str) -> bool:
    """Whether an attempt counts towards parking: it ran alone, or it raised."""
    return attempt.startswith(ALONE) or ", raised " in attempt


def cut_short(attempts: list[str]) -> bool:
    """Whether a worker died during one of these attempts (the action is then tried alone)."""
    return any(", raised " not in a for a in attempts)


def attempt_record(error: str | None) -> list[str]:
    """The attempts recorded on an unfinished action (module docstring), oldest
    first: each ``started ...`` line with what it raised, if anything."""
    attempts: list[str] = []
    for line in (error or "").splitlines():
        if line.startswith(STARTED):
            attempts.append(line)
        elif attempts and line:
            attempts[-1] += f", {line}"
    return attempts


def describe_attempts(attempts: list[str]) -> str:
    """A parked action's error: how many attempts counted, and how each attempt ended."""
    def ended(a: str) -> str:
        if ", raised " in a:
            return a
        return f"{a}, its worker stopped before it ended" + ("" if counts(a) else " (beside others: not counted)")
    return f"parked after {sum(map(counts, attempts))} attempts: " + "; ".join(
        f"#{n} {_short_time(ended(a))}" for n, a in enumerate(attempts, 1))


def _short_time(line: str) -> str:
    """now()'s nanoseconds cut to milliseconds: ``...T15:08:06.978712266`` -> ``...T15:08:06.978``."""
    head, sep, rest = line.partition(" at ")
    stamp, comma, tail = rest.partition(",")
    if "." in stamp:
        stamp = stamp[:stamp.index(".") + 4]
    return head + sep + stamp + comma + tail


class ActionQueue:
    name = "actions"

    def __init__(self, table, writer, versions_dir: str | None = None):
        self.table = table
        self.writer = writer
        self._versions_dir = versions_dir
        # Called (from the committing thread) after each append: this process's own
        # dispatcher wakes at once where it cannot watch the queue (object storage).
        self.appended: list = []

    def change_token(self):
        """Something that changes whenever any process commits to the queue.

        On a local database every commit adds a manifest to the table's
        ``_versions`` directory, so the directory's mtime is a ~30 us signal
        (an idle poller can look 50 times a second for ~0.2% of a core).  On
        object storage the table version is read instead (a request each time).
        """
        if self._versions_dir:
            try:
                return os.stat(self._versions_dir).st_mtime_ns
            except OSError:
                pass
        return self.table.version

    def watch(self):
        """A :class:`store.watch.CommitWatch` on the queue, or None where only polling works."""
        return watch_commits(self._versions_dir)

    def enqueue(self, type: str, *, agent_id: str, session_id: str, payload: dict | None = None,
                conversation_id: str | None = None, priority: int = 0, actor: str | None = None) -> dict:
        return self.enqueue_many(type, [(agent_id, session_id)], payload, conversation_id=conversation_id,
                                 priority=priority, actor=actor)[0]

    def enqueue_many(self, type: str, targets, payload: dict | None = None, *, conversation_id: str | None = None,
                     priority: int = 0, actor: str | None = None) -> list[dict]:
        """One action of ``type`` carrying ``payload`` per ``(agent_id, session_id)``
        of ``targets``, all in one commit (a bulk control: api/routes/bulk.py)."""
        rows = self.new_rows(type, targets, payload, conversation_id=conversation_id, priority=priority, actor=actor)
        return self.append(rows)

    def new_rows(self, type: str, targets, payload: dict | None = None, *, conversation_id: str | None = None,
                 priority: int = 0, actor: str | None = None) -> list[dict]:
        """The rows :meth:`enqueue_many` appends, not yet appended: api/idempotency.py
        adds its key and answer to them first, so both commit with the actions."""
        if type not in TYPES:
            raise ValueError(f"unknown action type {type!r}")
        return [{
            "id": str(ULID()),
            "created_at": codec.utcnow(),
            "type": type,
            "agent_id": filters.check_id(agent_id, "agent_id"),
            "session_id": filters.check_id(session_id, "session_id"),
            "conversation_id": conversation_id,
            "priority": int(priority),
            "payload": payload or {},
            "status": "pending",
            "processed": False,
            "processed_at": None,
            "claimed_by": None,
            "lease_until": None,
            "attempts": 0,
            "error": None,
            "actor": actor,
            "idempotency_key": None,
            "request_hash": None,
            "answer": None,
        } for agent_id, session_id in targets]

    def append(self, rows: list[dict]) -> list[dict]:
        """Append rows made by :meth:`new_rows` in one commit; returns them as a read would."""
        self.writer.append(self.name, rows)
        for listener in self.appended:
            listener()
        return [codec.decode(self.name, codec.encode(self.name, row)) for row in rows]

    def by_idempotency_key(self, key_hash: str, since: datetime) -> list[dict]:
        """The actions one request queued under an Idempotency-Key (its hash), if
        it was sent since ``since``, in the order they were queued."""
        where = filters.all_of(filters.eq_id("idempotency_key", key_hash), filters.ts_cmp("created_at", ">", since))
        return query.rows(self.table, self.name, where, order=[("id", True)], limit=MAX_REQUEST_ROWS)

    def get(self, action_id: str) -> dict | None:
        return query.first(self.table, self.name, filters.eq_id("id", action_id))

    def search(self, *, session_id: str | None = None, agent_id: str | None = None, type: str | None = None,
               status: str | None = None, newest_first: bool = True, limit: int = 100,
               offset: int = 0) -> list[dict]:
        """The audit log of control requests, filtered by checked ids and closed words."""
        where = filters.all_of(
            filters.eq_id("session_id", session_id) if session_id else None,
            filters.eq_id("agent_id", agent_id) if agent_id else None,
            filters.eq_word("type", type, TYPES) if type else None,
            filters.eq_word("status", status, STATUSES) if status else None,
        )
        order = [("created_at", not newest_first), ("id", not newest_first)]
        return query.rows(self.table, self.name, where, order=order, limit=limit, offset=offset)

    def cascaded(self, cause: str, type: str, session_ids: list[str]) -> set[str]:
        """The sessions among ``session_ids`` that have a ``type`` action whose
        payload says it was cascaded from the action ``cause`` (a tree's control,
        runtime/session/session_tree.py): read by session and type, checked here."""
        if not session_ids:
            return set()
        where = filters.all_of(filters.in_ids("session_id", session_ids), filters.eq_word("type", type, TYPES))
        rows = query.rows(self.table, self.name, where, limit=100_000, columns=["session_id", "payload"])
        return {r["session_id"] for r in rows if (r.get("payload") or {}).get("cascaded_from") == cause}

    def pending(self, limit: int = 100) -> list[dict]:
        """Pending actions, most urgent first, then in the order they were accepted."""
        order = [("priority", False), ("created_at", True), ("id", True)]
        return query.rows(self.table, self.name, PENDING, order=order, limit=limit)

    def find_create(self, *, session_id: str) -> dict | None:
        where = filters.all_of(filters.eq_word("type", "create", TYPES), filters.eq_id("session_id", session_id))
        return query.first(self.table, self.name, where, order=[("created_at", True)])

    def latest_create_for_agent(self, agent_id: str) -> dict | None:
        where = filters.all_of(filters.eq_word("type", "create", TYPES), filters.eq_id("agent_id", agent_id))
        return query.first(self.table, self.name, where, order=[("created_at", False)])

    def claim(self, action_ids: list[str], worker_id: str, lease_s: float, starting=()) -> list[str]:
        """Claim pending actions for ``worker_id``; returns the ids this worker now holds.

        Claiming does not count an attempt, except for the ids in ``starting``:
        actions whose handlers start the moment they are claimed (the first of
        an idle lane), whose claim records their attempt in the same commit
        (see the module docstring), so a lone control costs no extra commit.

        A claim is a conditional update (``status = 'pending'`` in the filter)
        that Lance commits atomically, retrying on a conflict with the filter
        evaluated again: of several racing workers exactly one updates each
        row.  Only a partial claim needs a read-back to learn which rows it got.
        """
        action_ids = list(dict.fromkeys(action_ids))
        starting = set(starting)
        held: set[str] = set()
        for ids, attempt in (([i for i in action_ids if i in starting], True),
                             ([i for i in action_ids if i not in starting], False)):
            if ids:
                held |= self._claim(ids, worker_id, lease_s, attempt)
        return [i for i in action_ids if i in held]

    def _claim(self, action_ids: list[str], worker_id: str, lease_s: float, attempt: bool) -> set[str]:
        lease_until = codec.utcnow() + timedelta(seconds=lease_s)
        where = filters.all_of(filters.in_ids("id", action_ids), PENDING)
        values = {
            "status": "'processing'",
            "claimed_by": filters.quote(filters.check_id(worker_id, "worker_id")),
            "lease_until": f"CAST({filters.quote(lease_until.strftime('%Y-%m-%dT%H:%M:%S.%f'))} AS TIMESTAMP)",
        }
        if attempt:
            values.update(attempts="attempts + 1", error=_started_line(worker_id))
        updated = self.writer.update_sql(self.name, where, values)
        if updated == len(action_ids):
            return set(action_ids)  # the commit changed every row: all are ours, no read-back
        if updated == 0:
            return set()
        held = query.rows(self.table, self.name, filters.all_of(
            filters.in_ids("id", action_ids), PROCESSING, filters.eq_id("claimed_by", worker_id)),
            columns=["id"], limit=len(action_ids))
        return {r["id"] for r in held}

    def submit_start_attempt(self, action_id: str, worker_id: str, alone: bool = False):
        """Queue counting an attempt of a claimed action whose handler is about
        to start (see the module docstring); the future resolves once durable.
        Starts by one worker share one commit."""
        return self.writer.submit_update_ids(self.name, "id", [filters.check_id(action_id, "action_id")], {
            "attempts": "attempts + 1", "error": _started_line(worker_id, alone)})

    def submit_attempt_failed(self, action_id: str, what: str):
        """Queue noting on the attempt record what the current attempt raised."""
        line = "raised " + " ".join(str(what).split())[:1000]
        return self.writer.submit_update_ids(self.name, "id", [filters.check_id(action_id, "action_id")], {
            "error": f"concat(coalesce(error, ''), {filters.quote(line)}, '\n')"})

    def finish(self, action_id: str, *, ok: bool, error: str | None = None) -> None:
        self.submit_finish(action_id, ok=ok, error=error).result()

    def submit_finish(self, action_id: str, *, ok: bool, error: str | None = None):
        """Queue marking an action done or failed; the future resolves once durable.
        Finishes with the same outcome (all the ``done`` ones) share one commit."""
        return self.writer.submit_update_ids(self.name, "id", [filters.check_id(action_id, "action_id")], {
            "status": filters.quote("done" if ok else "failed"),
            "processed": "true",
            "processed_at": "now()",
            "error": filters.quote(error[:4000]) if error else "NULL",
        })

    def release_expired(self, now: datetime | None = None) -> int:
        """Put actions whose lease ran out back to pending (their worker died)."""
        where = filters.all_of(PROCESSING, filters.ts_cmp("lease_until", "<", now or codec.utcnow()))
        if query.count(self.table, where) == 0:
            return 0  # an update that matches nothing still commits a version
        return self.writer.update(self.name, where, {"status": "pending", "claimed_by": None, "lease_until": None})

    def release(self, action_id: str, worker_id: str) -> int:
        """Put one action ``worker_id`` holds back to pending, for whoever runs its
        session now (runtime/dispatch/dispatcher.py, on SessionLost)."""
        where = filters.all_of(filters.eq_id("id", action_id), PROCESSING, filters.eq_id("claimed_by", worker_id))
        return self.writer.update(self.name, where, {"status": "pending", "claimed_by": None, "lease_until": None})

    def release_claims_of(self, worker_ids) -> int:
        """Put back what dead workers had claimed but not finished."""
        worker_ids = list(worker_ids)
        if not worker_ids:
            return 0
        where = filters.all_of(PROCESSING, filters.in_ids("claimed_by", worker_ids))
        if query.count(self.table, where) == 0:
            return 0
        return self.writer.update(self.name, where, {"status": "pending", "claimed_by": None, "lease_until": None})

    def open_count(self) -> int:
        """Actions pending or being applied: none means nothing to poll for and
        no lease that can run out until the queue changes."""
        return query.count(self.table, f"({PENDING}) OR ({PROCESSING})")

    def claimants(self) -> set[str]:
        """Workers holding actions in processing."""
        return {r["claimed_by"] for r in query.rows(self.table, self.name, PROCESSING, columns=["claimed_by"])
                if r["claimed_by"]}

    def count(self, status: str | None = None) -> int:
        where = filters.eq_word("status", status, STATUSES) if status else None
        return query.count(self.table, where)

    def open_in(self, session_ids) -> dict[str, dict[str, str]]:
        """session id -> {action id: status} of its actions not finished yet
        (``pending`` or ``processing``), for those of ``session_ids`` that have any."""
        session_ids = list(session_ids)
        if not session_ids:
            return {}
        where = filters.all_of(filters.any_of(PENDING, PROCESSING), filters.in_ids("session_id", session_ids))
        found: dict[str, dict[str, str]] = {}
        for row in query.rows(self.table, self.name, where, columns=["id", "session_id", "status"]):
            found.setdefault(row["session_id"], {})[row["id"]] = row["status"]
        return found

    def oldest_pending(self) -> dict | None:
        return query.first(self.table, self.name, PENDING, order=[("created_at", True)])

    def of_session(self, session_id: str, *, after: str | None = None, limit: int = 200) -> list[dict]:
        """A session's actions in id order (ULIDs: the order they were accepted),
        strictly after the action id ``after``: the cursor of GET /api/stream."""
        where = filters.all_of(filters.eq_id("session_id", session_id),
                               filters.id_cmp("id", ">", after) if after else None)
        return query.rows(self.table, self.name, where, order=[("id", True)], limit=limit)
