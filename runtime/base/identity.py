"""Which worker this agents.py process is.

On a local database the id is a *slot*: ``<host>-<n>`` for the lowest n whose
lock file under ``<data-dir>/workers/`` this process can lock.  The kernel
drops the lock when the process dies, however it dies, so a restarted worker
gets its old id back and resumes its own sessions at once, while a second
worker running beside it gets the next slot.  Without a local directory
(object storage) the id is random and takeover waits for the heartbeat to
go stale.
"""
import fcntl
import os
import re
import socket

from ulid import ULID

MAX_SLOTS = 64


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:40].strip("-.") or "host"


class WorkerIdentity:
    def __init__(self, worker_id: str, lock_file=None):
        self.worker_id = worker_id
        self._lock_file = lock_file  # kept open: closing it would release the slot

    @classmethod
    def claim(cls, data_dir: str | None) -> "WorkerIdentity":
        if not data_dir:
            return cls(f"{_host()}-{str(ULID())[-8:].lower()}")
        folder = os.path.join(data_dir, "workers")
        os.makedirs(folder, exist_ok=True)
        for n in range(MAX_SLOTS):
            worker_id = f"{_host()}-{n}"
            handle = open(os.path.join(folder, f"{worker_id}.lock"), "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            return cls(worker_id, handle)
        raise RuntimeError(f"all {MAX_SLOTS} worker slots in {folder} are taken")

    def release(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
