"""The action queue: control requests appended by app.py, applied by agents.py.

Life of an action: ``pending`` when appended, ``processing`` once a worker
claims it (with a lease), then ``done`` or ``failed``.  Rows are only ever
updated, never deleted, so the queue doubles as an audit log.
"""
from domain.statuses import ACTION_STATUSES
import os
from datetime import datetime, timedelta

from ulid import ULID

from store import codec, filters, query
from store.watch import watch_commits

TYPES = {"create", "pause", "resume", "interrupt", "destroy", "tool_approve", "tool_deny", "tool_result",
         "child_result", "child_message",  # sub-agents (runtime/child_sessions.py)
         "answer", "inbox_item"}  # inbox_item: internal (runtime/handlers.py), not offered over HTTP
STATUSES = ACTION_STATUSES
MAX_REQUEST_ROWS = 1000  # one request queues at most this many actions (a bulk control's cap)
PENDING = filters.eq_word("status", "pending", STATUSES)
PROCESSING = filters.eq_word("status", "processing", STATUSES)


class ActionQueue:
    name = "actions"

    def __init__(self, table, writer, versions_dir: str | None = None):
        self.table = table
        self.writer = writer
        self._versions_dir = versions_dir

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

    def claim(self, action_ids: list[str], worker_id: str, lease_s: float) -> list[str]:
        """Claim pending actions for ``worker_id``; returns the ids this worker now holds.

        The claim is one conditional update (``status = 'pending'`` in the
        filter), which Lance commits atomically, retrying on a conflict with
        the filter evaluated again: of several racing workers exactly one
        updates each row. Only a partial claim needs a read-back to learn
        which rows it got.
        """
        action_ids = list(dict.fromkeys(action_ids))
        if not action_ids:
            return []
        lease_until = codec.utcnow() + timedelta(seconds=lease_s)
        where = filters.all_of(filters.in_ids("id", action_ids), PENDING)
        updated = self.writer.update_sql(self.name, where, {
            "status": "'processing'",
            "claimed_by": filters.quote(filters.check_id(worker_id, "worker_id")),
            "lease_until": f"CAST({filters.quote(lease_until.strftime('%Y-%m-%dT%H:%M:%S.%f'))} AS TIMESTAMP)",
            "attempts": "attempts + 1",
        })
        if updated == len(action_ids):
            return action_ids  # the commit changed every row: all are ours, no read-back
        if updated == 0:
            return []
        held = query.rows(self.table, self.name, filters.all_of(
            filters.in_ids("id", action_ids), PROCESSING, filters.eq_id("claimed_by", worker_id)),
            columns=["id"], limit=len(action_ids))
        return [r["id"] for r in held]

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

    def release_claims_of(self, worker_ids) -> int:
        """Put back what dead workers had claimed but not finished."""
        worker_ids = list(worker_ids)
        if not worker_ids:
            return 0
        where = filters.all_of(PROCESSING, filters.in_ids("claimed_by", worker_ids))
        if query.count(self.table, where) == 0:
            return 0
        return self.writer.update(self.name, where, {"status": "pending", "claimed_by": None, "lease_until": None})

    def claimants(self) -> set[str]:
        """Workers holding actions in processing."""
        return {r["claimed_by"] for r in query.rows(self.table, self.name, PROCESSING, columns=["claimed_by"])
                if r["claimed_by"]}

    def count(self, status: str | None = None) -> int:
        where = filters.eq_word("status", status, STATUSES) if status else None
        return query.count(self.table, where)

    def oldest_pending(self) -> dict | None:
        return query.first(self.table, self.name, PENDING, order=[("created_at", True)])

    def of_session(self, session_id: str, *, after: str | None = None, limit: int = 200) -> list[dict]:
        """A session's actions in id order (ULIDs: the order they were accepted),
        strictly after the action id ``after``: the cursor of GET /api/stream."""
        where = filters.all_of(filters.eq_id("session_id", session_id),
                               filters.id_cmp("id", ">", after) if after else None)
        return query.rows(self.table, self.name, where, order=[("id", True)], limit=limit)
