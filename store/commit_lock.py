"""One commit to a table at a time: among this process's threads, and among
agents.py's processes on this machine that share the store (``Store(...,
commit_turns=True)``; app.py's writes, mostly appends to the queue that never
conflict, do not wait for a worker's turn).

Lance commits optimistically: a commit that finds another one landed first
checks the two against each other and tries again, backing off by multiples
of its first try's time.  Among the threads of one process the writer already
takes turns (store/writer.py: one committer per table, and maintenance holds
the same lock).  The worker processes of one agents.py (``--processes N``)
did not: a slow commit (a compaction or an index update over hundreds of
fragments) lost to the other worker's stream of appends again and again.
Measured with two processes at 100 agents (bench_processes): worker 0's
upkeep of agent_steps held its own steps for 12.9 s while the other worker
added 640 fragments, and worker 0 made 2 commits a second against the
other's 64; in a whole run of the suite two workers' commits and an upkeep
stalled for ~84 s in Lance's retries.  Taking turns across the processes too,
each upkeep took 0.4-0.9 s and the two workers committed alike.

The machine's turn is an advisory ``flock`` on one file per table, in a
directory of this user's named after the store's location (:func:`lock_dir_for`).
It is bounded: a process that has not got the lock after ``wait_s`` goes ahead
without it, as every commit did before (Lance's own checks keep it correct),
so a process that holds it and is frozen (SIGSTOP, a debugger) or slow only
slows the others down, never stops them (the turn is not fair either: a waiter
looks every few milliseconds, and a worker committing back to back can take
it again first; on a loaded machine some commits go ahead alone, as before); and once a commit has gone ahead
alone, the next ones do not wait for ``STUCK_FOR_S`` (10 s): a frozen holder
costs the others one wait of ``wait_s`` per 10 s, not one per commit.  Workers on other machines share
nothing here and race as before.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import stat
import tempfile
import threading
import time

log = logging.getLogger("store.commit_lock")

WAIT_S = 2.0  # how long a commit waits for another process's turn before it goes ahead without it
# After a commit went ahead without its turn, the holder is likely frozen: for
# this long the next commits look once and do not wait (a worker frozen for a
# minute would otherwise cost every commit of the others WAIT_S).
STUCK_FOR_S = 10.0
FIRST_NAP_S, LONGEST_NAP_S = 0.0002, 0.005
WARN_EVERY_S = 60.0


def lock_dir_for(uri: str) -> str | None:
    """This user's lock directory for the store at ``uri`` (the same for every
    process of this user on this machine that opens it), or None where none
    can be made safely (then commits take turns within each process only)."""
    local = uri[len("file://"):] if uri.startswith("file://") else uri
    canonical = os.path.realpath(local) if "://" not in local else uri
    base = os.path.join(tempfile.gettempdir(), f"agentsvc-commit-locks-{os.getuid()}")
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        info = os.lstat(base)
    except OSError as exc:
        log.warning("no commit lock directory (%s): commits take turns within each process only", exc)
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        # another user's directory, or a link: nobody else may decide when our commits wait
        log.warning("%s is not this user's private directory: commits take turns within each process only", base)
        return None
    path = os.path.join(base, hashlib.sha256(canonical.encode()).hexdigest()[:24])
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


class CommitLock:
    """The lock held while committing to one table (a context manager)."""

    def __init__(self, table: str, lock_dir: str | None, wait_s: float = WAIT_S):
        self.table = table
        self.path = os.path.join(lock_dir, f"{table}.lock") if lock_dir else None
        self.wait_s = wait_s
        self.went_alone = 0  # commits that went ahead without the machine's turn
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._fd_pid = 0
        self._holds_file = False
        self._warned_at = 0.0
        self._stuck_until = 0.0  # monotonic: until then, do not wait for the turn (see STUCK_FOR_S)

    def __enter__(self):
        self._thread_lock.acquire()
        try:
            self._holds_file = self.path is not None and self._take_file()
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc_info):
        try:
            if self._holds_file:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                self._holds_file = False
        finally:
            self._thread_lock.release()
        return False

    def _take_file(self) -> bool:
        """The machine's turn, within ``wait_s``; False when it went ahead without it."""
        fd = self._file()
        if fd is None:
            return False
        now = time.monotonic()
        deadline, nap = (now if now < self._stuck_until else now + self.wait_s), FIRST_NAP_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._stuck_until = 0.0
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    self._went_alone()
                    return False
                time.sleep(nap)
                nap = min(nap * 2, LONGEST_NAP_S)

    def _file(self) -> int | None:
        """The lock file, opened once per process (a forked child opens its own:
        a lock belongs to the open file, which a fork would share)."""
        if self._fd is not None and self._fd_pid == os.getpid():
            return self._fd
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            log.warning("commit lock %s: %s; commits to %s take turns within this process only",
                        self.path, exc, self.table)
            self.path = None
            return None
        self._fd_pid = os.getpid()
        return self._fd

    def _went_alone(self) -> None:
        self.went_alone += 1
        now = time.monotonic()
        if now >= self._stuck_until:
            self._stuck_until = now + STUCK_FOR_S
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("a commit to %s waited %.1f s for another process's turn and went ahead without it "
                        "(%d so far; a long commit or upkeep of another worker, a loaded machine, or a frozen "
                        "process)", self.table, self.wait_s, self.went_alone)
