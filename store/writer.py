"""The single path every write to LanceDB takes, with group commit.

Every table has one committer thread.  Appends and upserts are queued to it;
each time it is free it takes *everything* queued, coalesces consecutive
appends into one ``add`` and consecutive upserts into one ``merge_insert``
(the last row per key wins), commits, and only then resolves the callers'
futures.  An idle system therefore commits each write at once, and a busy one
commits many writes per version, which is what keeps LanceDB's version count,
manifest size and query latency from growing with the number of writers
(measured: 10,000 single-row commits made 4.4 GB and 1.8 s queries).

A caller is told its write succeeded only after the commit that holds it, so a
crash can lose only writes nobody was told about.  Callers on an asyncio event
loop pass it (``loop=``) and get an asyncio future instead of a thread-safe
one: a commit then settles all of that loop's futures with one wake-up of the
loop, where a thousand agents waiting on ``asyncio.wrap_future`` cost a
thousand (profiled at 1,000 agents: thread futures and their chaining were a
third of the event loop's time per step).

Group commit is *adaptive*: a lone writer is never made to wait, and many
writers share a commit.  After each commit the committer remembers how many
writes it carried (the writers active now: each session has one step in
flight at a time).  When that was one, the next write is committed as soon as
it arrives, so a lone agent's step costs one commit and nothing more.  When it
was more, the committer gathers until that many writes are queued again or
``min_interval_s`` has passed since the last commit, whichever comes first, so
a hundred agents stepping together share one commit instead of racing for a
hundred.  Every commit is a table version that maintenance must later compact
and clean up; under contention the interval keeps the commit rate bounded
(in the sustained-load soak at ~50 commits/s, versions once piled up faster
than cleanup removed them; BENCHMARKS.md §4b).  An idle table commits at once.

Updates and deletes (conditional, by filter) run directly, under the same
per-table lock as the committer, because their outcome depends on the rows
committed before them.  In agents.py that lock is also taken by the other
worker processes of the store on this machine (store/commit_lock.py), so
their commits take turns instead of racing in Lance's retries.  Two rules hold everywhere: empty changes are never
committed (an empty add, or an update or delete matching nothing, still writes
a table version), and nothing is written with ``mode="overwrite"`` (it replaces
the whole table, dropping what other processes committed meanwhile).
"""
import asyncio
import logging
import random
import threading
import time
from collections import deque
from concurrent.futures import Future

import lance
import pyarrow as pa

from store import codec, filters
from store.commit_lock import CommitLock

log = logging.getLogger("store.writer")


CONFLICT_ATTEMPTS = 6

# How Lance says "another writer got there first; try again": a conflict it did
# not rebase, a compaction preempted by an update, or its own retry loop giving
# up while commits kept landing ("Too many concurrent writers").
RETRYABLE_MARKERS = ("conflict", "retryable", "too many concurrent writers", "preempted")

# Seconds between two commits of one table while writes keep coming.  The queue
# is left unpaced: its commits carry control actions, whose latency users see.
DEFAULT_MIN_COMMIT_INTERVAL_S = 0.05
# Under contention a commit also starts this long after the last one began, however
# fast its writers come back: sixteen writers in lockstep otherwise committed
# 86 times a second, and upkeep fell behind (278 fragments against a bound of
# 200, tests/service/test_sustained_load.py; that was before compaction committed
# under the table's lock, store/maintenance.py).  The gap caps a hundred agents
# in lockstep at 100 / gap steps a second: 20 ms held them to ~4,650 (issue 28's
# target is 5,000), 15 ms gives ~6,100 at up to 67 commits a second, which the
# soak and the sustained-load test show upkeep keeps ahead of.
CONTENDED_MIN_GAP_S = 0.015
UNPACED_TABLES = ("actions",)

# Upserts that replace a matched row only when it satisfies a condition
# (``target.`` = the stored row, ``source.`` = the new one).  agent_state is
# fenced by its owner: a worker's snapshot save never overwrites a session
# another worker has adopted (runtime/base/fence.py).  A row refused this way is
# reported to its writers: their futures resolve to True ("some row was refused").
UPSERT_CONDITIONS = {
    # A finished session runs nowhere: any worker may take it over by saving it
    # (a sub-agent's result or a resume wakes it, runtime/session/child_sessions.py).
    "agent_state": ("target.owner IS NULL OR source.owner IS NULL OR target.owner = source.owner"
                    " OR target.status IN ('stopped', 'done', 'error')"),
}


# Appends go to the table's Lance dataset directly (``LanceDataset.insert``):
# LanceDB's ``add`` reads the newest manifest before every write (the store
# reads with read_consistency_interval 0) and checks the batch in Python, which
# made a lone agent's one-row commit 6.3 ms against 3.9 ms (p50, interleaved on
# one machine, bench_lance_floor's rows).  The dataset object follows our own
# commits; Lance checks an append against whatever others committed since (it
# never conflicts with another append or a compaction).  One idle this long is
# opened again, so the commits it must check stay few.
APPEND_DATASET_MAX_IDLE_S = 10.0
APPEND_CACHE_BYTES = 4 * 1024 * 1024  # the append dataset's own caches (each): manifests, no indexes


def is_conflict(exc: Exception) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in RETRYABLE_MARKERS)


def retry_conflicts(table: str, kind: str, commit):
    """Run ``commit`` again when another writer won the race for the same version.

    Lance retries some conflicts itself but not all (an update racing another
    process's update or a compaction can raise "Retryable commit conflict").
    Retrying is safe here: appends are not yet written, and conditional updates
    re-evaluate their filter against the new version.  Each lost race is
    logged with the table, the kind of write and how long the try took: Lance's
    own retries happen inside one try and can make it last up to its 30 s
    retry timeout (a test's two workers once stalled for 84 s, and the line
    did not say on which table).
    """
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        started = time.monotonic()
        try:
            return commit()
        except (RuntimeError, OSError, ValueError) as exc:
            if attempt == CONFLICT_ATTEMPTS or not is_conflict(exc):
                raise
            log.info("commit conflict on %s (%s, attempt %d, the try took %.1f s), retrying: %s",
                     table, kind, attempt, time.monotonic() - started, str(exc)[:200])
            time.sleep(random.uniform(0.005, 0.02) * 2 ** attempt)


class Fenced(RuntimeError):
    """A write was dropped before its commit because its ``guard`` said no."""


class _Request:
    """A queued write.  ``rows`` holds the rows of an append or upsert, or the
    ids of an update-by-ids; ``key`` is what requests must share to be merged
    into one commit (the upsert key, or the update's column and values).
    ``guard``, when given, is asked right before the commit: False drops the
    request (its future raises :class:`Fenced`), e.g. a step row of a worker
    whose write lease ran out while the row waited (runtime/base/fence.py)."""

    __slots__ = ("kind", "rows", "key", "future", "guard", "loop")

    def __init__(self, kind: str, rows: list, key, guard=None, loop: asyncio.AbstractEventLoop | None = None):
        self.kind, self.rows, self.key, self.guard, self.loop = kind, rows, key, guard, loop
        self.future = loop.create_future() if loop is not None else Future()

    def taken(self) -> bool:
        """Mark a thread future running (it can no longer be cancelled under us);
        False when its caller gave up on it already, so it is dropped unwritten.
        An asyncio future's write goes ahead whatever happened to its waiter."""
        return self.loop is not None or self.future.set_running_or_notify_cancel()


def _settle(requests: list[_Request], result=None, exc: BaseException | None = None) -> None:
    """Resolve the requests' futures: thread futures at once, asyncio futures
    with one call into each loop for all of its futures."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
    for request in requests:
        if request.loop is None:
            request.future.set_exception(exc) if exc is not None else request.future.set_result(result)
        else:
            by_loop.setdefault(request.loop, []).append(request.future)
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_on_loop, futures, result, exc)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def _settle_on_loop(futures: list[asyncio.Future], result, exc: BaseException | None) -> None:
    for future in futures:
        if not future.done():  # a waiter that was cancelled left its future cancelled
            future.set_exception(exc) if exc is not None else future.set_result(result)


class _TableCommitter:
    """Owns the commits of one table: a queue and the thread that drains it."""

    def __init__(self, name: str, table, max_batch_rows: int, stats, min_interval_s: float = 0.0,
                 lock_dir: str | None = None):
        self.name = name
        self.table = table
        self.schema = table.schema
        self.max_batch_rows = max_batch_rows
        self.stats = stats
        self.min_interval_s = min_interval_s
        # held while committing; updates and maintenance take it too, and so do
        # the other processes of this store on this machine (store/commit_lock.py)
        self.lock = CommitLock(name, lock_dir)
        self._last_commit = 0.0
        self._writers = 1  # writes carried by the last commit: how many to gather for the next
        self._last_start = 0.0  # when the last commit began (monotonic)
        self._queue: deque[_Request] = deque()
        self._appends = None  # the Lance dataset appends go to, and when it last committed (monotonic)
        self._appended_at = 0.0
        self._wakeup = threading.Condition()
        self._committing = False  # a batch taken from the queue is being committed
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"commit-{name}", daemon=True)
        self._thread.start()

    def submit(self, request: _Request) -> Future:
        with self._wakeup:
            if self._closed:
                raise RuntimeError(f"writer for {self.name} is closed")
            self._queue.append(request)
            self._wakeup.notify()
        return request.future

    def close(self, timeout: float = 10.0) -> None:
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        self._thread.join(timeout)

    def drain(self, deadline: float) -> bool:
        """Wait until nothing is queued or being committed (until the monotonic
        ``deadline``); whether it got there."""
        with self._wakeup:
            while self._queue or self._committing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wakeup.wait(left)
            return True

    def _take(self) -> list[_Request] | None:
        with self._wakeup:
            while not self._queue and not self._closed:
                self._wakeup.wait()
            if not self._queue:
                return None
            self._gather()
            taken, rows = [], 0
            while self._queue and (not taken or rows + len(self._queue[0].rows) <= self.max_batch_rows):
                request = self._queue.popleft()
                if request.taken():
                    taken.append(request)
                    rows += len(request.rows)
            self._committing = True
            return taken

    def _gather(self) -> None:
        """Under contention, wait (holding ``_wakeup``) until as many writes are
        queued as the last commit carried (and CONTENDED_MIN_GAP_S has passed
        since it began), or until ``min_interval_s`` has passed, whichever is first.
        A lone writer (the last commit carried one write) and an idle table do
        not wait at all."""
        if self._writers <= 1:
            return
        deadline = self._last_commit + self.min_interval_s
        earliest = self._last_start + min(CONTENDED_MIN_GAP_S, self.min_interval_s)
        while not self._closed:
            now = time.monotonic()
            if now >= deadline or (len(self._queue) >= self._writers and now >= earliest):
                return
            self._wakeup.wait((earliest if len(self._queue) >= self._writers else deadline) - now)

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            self._writers = len(taken)
            for group in _consecutive_groups(taken):
                try:
                    self._commit(group)
                except Exception:  # the thread must outlive any one bad batch
                    log.exception("committer of %s: unexpected error", self.name)
            with self._wakeup:
                self._committing = False
                self._wakeup.notify_all()  # a drain may wait for this batch

    def _commit(self, group: list[_Request]) -> None:
        if any(request.guard is not None for request in group):
            group = _guarded(group)
            if not group:
                return
        kind = group[0].kind
        rows = [row for request in group for row in request.rows]
        if kind == "upsert":
            rows = list({row[group[0].key]: row for row in rows}.values())  # last write per key wins
        started = time.perf_counter()
        self._last_start = time.monotonic()
        try:
            with self.lock:
                refused = self._write(kind, group[0].key, rows)
                self._last_commit = time.monotonic()
        except Exception as exc:
            log.error("commit of %d %s rows to %s failed: %s", len(rows), kind, self.name, exc)
            _settle(group, exc=exc)
            return
        self.stats.record(self.name, len(group), len(rows), time.perf_counter() - started)
        _settle(group, refused or None)

    def _write(self, kind: str, key, rows: list) -> bool:
        """Commit one group; True when a conditional upsert refused some of its rows."""
        if kind == "update_ids":
            column, values_sql = key
            where = filters.in_ids(column, list(dict.fromkeys(rows)))
            retry_conflicts(self.name, kind, lambda: self.table.update(where=where, values_sql=dict(values_sql)))
            return False
        batch = pa.Table.from_pylist([codec.encode(self.name, r) for r in rows], schema=self.schema)
        if kind == "append":
            retry_conflicts(self.name, kind, lambda: self._append(batch))
            return False
        condition = UPSERT_CONDITIONS.get(self.name)
        result = retry_conflicts(self.name, kind, lambda: self.table.merge_insert(key)
                                 .when_matched_update_all(where=condition).when_not_matched_insert_all().execute(batch))
        return condition is not None and result.num_updated_rows + result.num_inserted_rows < len(rows)

    def _append(self, batch: pa.Table) -> None:
        """One append commit, through the table's Lance dataset (see
        APPEND_DATASET_MAX_IDLE_S); a failed one opens the dataset again next time."""
        dataset, self._appends = self._appends, None
        if dataset is None or time.monotonic() - self._appended_at > APPEND_DATASET_MAX_IDLE_S:
            dataset = self.table.to_lance(session=lance.Session(index_cache_size_bytes=APPEND_CACHE_BYTES,
                                                                metadata_cache_size_bytes=APPEND_CACHE_BYTES))
        dataset.insert(batch)
        self._appends, self._appended_at = dataset, time.monotonic()


def _guarded(group: list[_Request]) -> list[_Request]:
    """The requests whose guard allows them to be committed now; the others fail."""
    kept, dropped = [], []
    for request in group:
        (kept if request.guard is None or request.guard() else dropped).append(request)
    if dropped:
        _settle(dropped, exc=Fenced("write dropped: the writer's lease ran out"))
    return kept


def _consecutive_groups(requests: list[_Request]) -> list[list[_Request]]:
    """Split into runs that can share one commit (same kind, same key), keeping order."""
    groups: list[list[_Request]] = []
    for request in requests:
        if groups and groups[-1][0].kind == request.kind and groups[-1][0].key == request.key:
            groups[-1].append(request)
        else:
            groups.append([request])
    return groups


class CommitStats:
    """Counters for logs and metrics: how many commits, holding how many writes."""

    def __init__(self):
        self._lock = threading.Lock()
        self.commits = 0
        self.writes = 0
        self.rows = 0
        self.commit_seconds = 0.0
        self.by_table: dict[str, int] = {}

    def record(self, table: str, writes: int, rows: int, seconds: float) -> None:
        with self._lock:
            self.commits += 1
            self.writes += writes
            self.rows += rows
            self.commit_seconds += seconds
            self.by_table[table] = self.by_table.get(table, 0) + 1


class Writer:
    def __init__(self, tables: dict, max_batch_rows: int = 2000,
                 min_commit_interval_s: float = DEFAULT_MIN_COMMIT_INTERVAL_S, lock_dir: str | None = None):
        """``lock_dir``: where the processes of this store on this machine take
        turns to commit (store/commit_lock.py ``lock_dir_for``); None: each
        process's threads take turns, the processes race."""
        self.stats = CommitStats()
        self._committers = {
            name: _TableCommitter(name, table, max_batch_rows, self.stats,
                                  0.0 if name in UNPACED_TABLES else min_commit_interval_s, lock_dir)
            for name, table in tables.items()}

    # ---- group-committed ------------------------------------------------

    def submit_append(self, table: str, rows: list[dict], guard=None, loop=None) -> Future:
        """Queue rows for the next commit of ``table``; the future resolves once committed
        (or raises :class:`Fenced` when ``guard()`` is false at commit time).  With
        ``loop`` (the caller's running event loop) it is an asyncio future of that loop."""
        return self._submit(table, "append", rows, None, guard, loop)

    def submit_upsert(self, table: str, key: str, rows: list[dict], loop=None) -> Future:
        """Queue insert-or-replace of whole rows by ``key`` (the table's declared primary key)."""
        return self._submit(table, "upsert", rows, key, None, loop)

    def submit_update_ids(self, table: str, column: str, ids: list[str], values_sql: dict) -> Future:
        """Queue ``UPDATE table SET values_sql WHERE column IN ids``; consecutive
        requests with the same values become one commit.  The values are SQL
        expressions built by the store (e.g. ``now()``, quoted literals)."""
        return self._submit(table, "update_ids", list(ids), (column, tuple(sorted(values_sql.items()))))

    def append(self, table: str, rows: list[dict]) -> None:
        self.submit_append(table, rows).result()

    def upsert(self, table: str, key: str, rows: list[dict]) -> None:
        self.submit_upsert(table, key, rows).result()

    def _submit(self, table: str, kind: str, rows: list[dict], key: str | None, guard=None,
                loop: asyncio.AbstractEventLoop | None = None) -> Future:
        if not rows:
            done = loop.create_future() if loop is not None else Future()
            done.set_result(None)
            return done
        return self._committers[table].submit(_Request(kind, list(rows), key, guard, loop))

    # ---- direct, conditional --------------------------------------------

    def update(self, table: str, where: str, values: dict) -> int:
        """Update matching rows; returns how many matched.  ``where`` must come
        from :mod:`store.filters`."""
        if not values:
            return 0
        committer = self._committers[table]
        encoded = codec.encode(table, values)
        with committer.lock:
            result = retry_conflicts(table, "update", lambda: committer.table.update(where=where, values=encoded))
        self.stats.record(table, 1, result.rows_updated, 0.0)
        return result.rows_updated

    def update_sql(self, table: str, where: str, values_sql: dict) -> int:
        """Update with SQL expressions as values (e.g. ``attempts + 1``).  The
        expressions are constants of the store, never input."""
        committer = self._committers[table]
        with committer.lock:
            result = retry_conflicts(table, "update", lambda: committer.table.update(where=where, values_sql=values_sql))
        self.stats.record(table, 1, result.rows_updated, 0.0)
        return result.rows_updated

    def delete(self, table: str, where: str) -> None:
        committer = self._committers[table]
        with committer.lock:
            retry_conflicts(table, "delete", lambda: committer.table.delete(where))
        self.stats.record(table, 1, 0, 0.0)

    def table_lock(self, table: str):
        """The lock held while this process commits to ``table`` (for maintenance)."""
        return self._committers[table].lock

    def drain(self, timeout: float) -> bool:
        """Wait until every write submitted so far has been committed (or has
        failed), at most ``timeout`` seconds; whether it got there.  A worker
        that leaves waits here before it records itself stopped: a commit still
        in flight (Lance retries a conflicting one for up to 30 s) landed after
        another worker had taken its sessions over, beside that worker's row of
        the same iteration (the kill loop over two worker processes)."""
        deadline = time.monotonic() + timeout
        return all(committer.drain(deadline) for committer in self._committers.values())

    def close(self) -> None:
        """Commit what is queued and stop the committer threads."""
        for committer in self._committers.values():
            committer.close()
