"""workers: one row per agents.py process, with a heartbeat.

A worker whose heartbeat is older than ``dead_after_s`` is taken for dead: its
claimed actions go back to the queue and its sessions are adopted by a live
worker.  A live worker is not yet serving while it adopts sessions after a
start: each beat says whether it polls the queue (``polling``), which app.py's
``GET /readyz`` reads.
"""
import os
import socket
from datetime import datetime, timedelta, timezone

from store import codec, filters, query


class WorkerTable:
    name = "workers"
    key = "worker_id"

    def __init__(self, table, writer):
        self.table = table
        self.writer = writer
        self._started = codec.utcnow()

    def submit_beat(self, worker_id: str, status: str = "running", maintenance: dict | None = None,
                    polling: bool = False):
        """Queue this worker's heartbeat (group-committed); returns the commit's future.
        ``maintenance`` is how this worker's table upkeep is going, for ``GET /api/health``;
        ``polling``: whether it polls the queue now, for ``GET /readyz``."""
        now = codec.utcnow()
        return self.writer.submit_upsert(self.name, self.key, [{
            "worker_id": filters.check_id(worker_id, "worker_id"), "host": socket.gethostname(),
            "pid": os.getpid(), "status": status, "started_at": self._started, "heartbeat_at": now,
            "maintenance": maintenance, "polling": polling and status == "running"}])

    def alive(self, dead_after_s: float, polling: bool = False) -> set[str]:
        """The workers whose heartbeat is fresh (``polling``: and says they poll the queue)."""
        since = codec.utcnow() - timedelta(seconds=dead_after_s)
        where = filters.all_of(filters.eq_word("status", "running", {"running", "stopped"}),
                               filters.ts_cmp("heartbeat_at", ">=", since), "polling = true" if polling else None)
        return {r["worker_id"] for r in query.rows(self.table, self.name, where, columns=["worker_id"])}

    def beats(self) -> dict[str, tuple[str, datetime | None]]:
        """Every worker's (status, last heartbeat as a UTC datetime): one read, from
        which an adoption round tells who is alive and who died since the last round."""
        out = {}
        for r in query.rows(self.table, self.name, None, columns=["worker_id", "status", "heartbeat_at"]):
            beat = codec.parse_time(r["heartbeat_at"])
            out[r["worker_id"]] = (r["status"], beat.replace(tzinfo=timezone.utc) if beat and not beat.tzinfo
                                   else beat)
        return out

    def all(self) -> list[dict]:
        return query.rows(self.table, self.name, None, order=[("worker_id", True)])
