"""Keeping tables small and fast while they are written to all the time.

Every commit writes a new table version; without upkeep, fragments and
versions pile up and each query and commit gets slower (measured: 10,000
single-row commits left 4.4 GB of manifests and a 1.8 s poll).  ``Maintainer``
compacts small fragments, folds new rows into the indexes and removes versions
older than a window, table by table, as soon as enough versions have
accumulated since it last did so.  agents.py drives it from a background thread.

Maintenance must win against the commit stream at any rate the service
produces, or versions and fragments pile up faster than it removes them (the
sustained-load soaks, BENCHMARKS.md §4b–4j).  Three things make sure it does:

- It runs *often* (every ``every_versions`` new versions, checked every couple
  of seconds), so each run compacts a few dozen fragments and removes a few
  hundred versions: cheap, where a rare run grew to seconds and then lost every
  commit race.
- On an append-only table its first try rewrites the small fragments while
  the appends go on, and only the compaction's commit holds this process's
  committer for the table: Lance then rebases it once over what landed meanwhile
  (racing every append instead, it lost for 30 s at a time at ~20 commits a
  second, and the fragments piled up past 1,000).  A table that takes
  updates holds its commit lock from the first try (an update would preempt
  the compaction and leave its files behind).  When a try loses anyway (Lance's "Retryable
  commit conflict", or its retry loop giving up with "Too many concurrent
  writers"), every further try holds this process's commit lock for the table:
  the table's committer waits for the run instead of racing it.  Writes queue
  up meanwhile and go out in the next (group) commit, so nothing is lost and
  steps only slow down for the length of one run.  "This process's" lock is
  also the other agents.py workers' of the store on this machine (store/commit_lock.py,
  bounded at 2 s a commit): the workers of ``--processes N`` that do no upkeep
  wait for it too instead of outracing it (at 100 agents one held upkeep of
  agent_steps had taken 12.9 s while the other worker added 640 fragments).
- The writers are paced (``store.writer``): a table commits at most ~20 times
  a second however many agents step, which bounds the versions a run has to
  clean up.

Each run's work is proportional to what was written since the last run, not
to the table's size, because LanceDB's one-call ``optimize()`` rewrote every
index of the table and the table's growing last fragment on every run: at
300k steps a run took 2–6 s and each run's copies of the four indexes, kept
for the cleanup window, made the disk 6–7x the rows (BENCHMARKS.md §4b).  So a
run goes through Lance's own dataset API (``pylance``, the same Lance as LanceDB's):

- compaction merges only fragments smaller than ``COMPACT_TARGET_ROWS``; a
  full fragment is never rewritten again;
- new rows go into a small *delta* segment of each index
  (``num_indices_to_merge=0``); once an index has ``MAX_INDEX_SEGMENTS``
  segments the deltas are merged into one, and into the base segment only
  when they have grown to ``FULL_MERGE_RATIO`` of it, so a full rewrite
  happens each time the table grows by about half (amortised O(1) per row);
- cleanup removes versions older than the window;
- between two runs of an append-only table or of the action queue, every
  round merges the small fragments that its commits added (one per commit)
  into one, because each read scans every fragment the indexes do not cover
  yet (:meth:`Maintainer.compact_tail`).

Cleanup keeps ``keep_versions_s`` of old versions (default 10 s): readers
re-resolve the latest version on every query (``read_consistency_interval=0``)
and a read that loses a race with cleanup is retried on the newest version
(``store.query``), so the window only has to cover reads in flight, not a
fixed "reasonable" age.  The versions kept are then about window × commit rate,
and they are not small: a table with a primary key (agent_state, tool_calls...)
writes ~32 KB of key filter into each version's manifest and transaction file,
so at 20 commits/s every second of window costs ~1.3 MB of disk.

The outcome of every run is kept per table (:meth:`Maintainer.health`) for the
metrics, the worker's heartbeat row and ``GET /api/health``; a table whose
fragments or versions pass a threshold is logged as a warning.
"""
import logging
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

import lance
from lance.optimize import Compaction, CompactionOptions
from lancedb.index import Bitmap, BTree

from store import query
from store.schemas import INDEXES
from store.search import SearchIndexWatch
from store.writer import is_conflict

log = logging.getLogger("store.maintenance")

INDEX_CONFIGS = {"bitmap": Bitmap, "btree": BTree}

WARN_FRAGMENTS = 200
WARN_VERSIONS = 2000

COMPACT_TARGET_ROWS = 100_000  # fragments this big are left as they are
MAX_INDEX_SEGMENTS = 8  # an index's segments (base + deltas) before its deltas are merged
FULL_MERGE_RATIO = 0.5  # the deltas are merged into the base once they are this big next to it
# Tables that only ever get appends (and rare retention deletes).  Lance rebases
# a compaction over appends, so their upkeep runs beside their commits.  Every
# other table takes updates or upserts, which preempt a compaction and leave its
# rewritten files on disk for 7 days ("Compaction commit failed; leaving N
# rewritten fragment(s) in place for GC"): their upkeep holds the table's commit
# lock from the first try (in this process; another worker can still preempt it).
APPEND_ONLY = frozenset({"agent_steps", "conversation_messages"})
# ... unless that table is committing fast: a lone agent commits a step at once
# (store/writer.py), ~100 times a second, and a compaction racing that lost
# every rebase until Lance's own retry loop gave up (one upkeep of agent_steps
# took 45 s, while 700 fragments piled up and each commit slowed 3x).  Above
# this rate this process's commits wait for the compaction from the first try:
# a short wait for the steps, against an upkeep that never lands.
BUSY_COMMITS_PER_S = 20.0
LANCE_CACHE_BYTES = 4 * 1024 * 1024  # a maintenance run's caches (each), apart from the Store's
# Each group commit adds one small fragment (~20 rows at 400 steps/s), and a
# read scans every fragment the indexes do not cover yet: each one cost a page
# read ~0.4 ms (100 of them: 40 ms against 5 ms with none; BENCHMARKS.md §4e).  Between
# two upkeeps of an append-only table (~9 s in the soak) 180 piled up, so every
# round first merges the small ones into one: cheap, since only fragments under
# TAIL_TARGET_ROWS are candidates and the full fragments are left alone.
TAIL_TARGET_ROWS = 10_000
TAIL_EVERY_VERSIONS = 10
# The tables whose small fragments are merged between upkeeps: the append-only
# ones, and the action queue.  Every dispatcher polls the queue all the time,
# and each enqueue, claim and finish adds a fragment: ~40 piled up between its
# upkeeps in the soak, and a poll took 10.4 ms with 44 of them against 2.2 ms
# with one (BENCHMARKS.md §4f).  The queue takes updates (claims), so its merge holds the
# table's commit lock, as its upkeep does.
TAIL_MERGED = APPEND_ONLY | {"actions"}
# A merge of small fragments takes well under a second; one that took this long
# is logged even when it lost its race (which is otherwise routine and quiet):
# in a whole run of the suite a worker's upkeep went quiet for about a minute, and
# its log could not say where the time went.
SLOW_S = 5.0


def ensure_indexes(tables: dict) -> None:
    """Create the indexes of :data:`INDEXES` that a table does not have yet."""
    for name, wanted in INDEXES.items():
        table = tables.get(name)
        if table is None:
            continue
        have = {tuple(ix.columns) for ix in table.list_indices()}
        for column, kind in wanted:
            if (column,) in have:
                continue
            try:
                table.create_index(column, config=INDEX_CONFIGS[kind]())
                log.info("created %s index on %s.%s", kind, name, column)
            except Exception as exc:  # another process created it first, most likely
                log.debug("index %s.%s: %s", name, column, exc)


def upkeep_session() -> lance.Session:
    """Small caches of a run's own, dropped with it.

    Not one session for every run: rewriting an FTS index opens the old
    index's files and keeps the reader in the session's index cache, which
    counts it as next to nothing, so it is never evicted.  One shared session
    held every replaced FTS index of the process open (deleted files, and
    their memory: agents.py's RSS grew ~3 MB a minute in the soak, and its
    open files by ~15 a minute)."""
    return lance.Session(index_cache_size_bytes=LANCE_CACHE_BYTES, metadata_cache_size_bytes=LANCE_CACHE_BYTES)


# Listing versions reads every manifest, and cleanup deletes hundreds of them
# in one run: under load the listing lost that race four times running
# (~0.1 s of retries, CI on 2026-11-28). Ten retries wait about five seconds.
SHAPE_RETRIES = 10


def table_shape(table) -> dict:
    """Fragments, versions, rows and bytes of a table, as it is now (read again
    should cleanup remove a manifest while it is listed)."""
    def read():
        stats = table.stats()
        return {"fragments": stats["fragment_stats"]["num_fragments"], "versions": len(table.list_versions()),
                "rows": stats["num_rows"], "bytes": stats["total_bytes"]}
    return query.retrying(table, read, retries=SHAPE_RETRIES)


class TableHealth:
    """What the maintainer knows of one table: its shape after the last run, and how runs went."""

    def __init__(self):
        self.shape: dict = {}
        self.runs = 0
        self.failures = 0  # tries that failed; a run that succeeded on a later try counts its failed ones
        self.abandoned = 0  # runs that gave up after every try
        self.consecutive_abandoned = 0
        self.last_run_at: datetime | None = None
        self.last_ok_at: datetime | None = None
        self.last_seconds = 0.0
        self.last_error: str | None = None
        self.tail_compactions = 0  # merges of the small fragments between upkeeps (append-only tables)

    def as_dict(self) -> dict:
        return {**self.shape, "runs": self.runs, "failures": self.failures, "abandoned": self.abandoned,
                "tail_compactions": self.tail_compactions,
                "last_run_at": _iso(self.last_run_at), "last_ok_at": _iso(self.last_ok_at),
                "last_seconds": round(self.last_seconds, 3), "last_error": self.last_error}


class Maintainer:
    def __init__(self, store, *, every_versions: int = 100, min_interval_s: float = 2.0,
                 keep_versions_s: float = 10.0, attempts: int = 5,
                 warn_fragments: int = WARN_FRAGMENTS, warn_versions: int = WARN_VERSIONS):
        self.store = store
        self.every_versions = every_versions
        self.min_interval_s = min_interval_s
        self.keep_versions = timedelta(seconds=keep_versions_s)
        self.attempts = attempts
        self.warn_fragments, self.warn_versions = warn_fragments, warn_versions
        self._last_version: dict[str, int] = {}
        self._tail_version: dict[str, int] = {}
        self._last_run: dict[str, float] = {}
        self._commit_marks: dict[str, tuple[float, int]] = {}  # per table: (when, commits so far)
        self._busy: set[str] = set()  # tables committing faster than BUSY_COMMITS_PER_S
        self.tables: dict[str, TableHealth] = {name: TableHealth() for name in store.tables}
        self.search_indexes = SearchIndexWatch()  # FTS indexes with many unindexed rows (store/search.py)
        self.runs = 0
        self.failures = 0
        self.abandoned = 0
        self.seconds = 0.0

    def due(self) -> list[str]:
        """Tables with at least ``every_versions`` new versions, not optimized in the last ``min_interval_s``."""
        now = time.monotonic()
        due = []
        for name, table in self.store.tables.items():
            version = table.version
            last = self._last_version.get(name, 0)  # 0: catch up on what an earlier run left
            if version - last >= self.every_versions and now - self._last_run.get(name, 0) >= self.min_interval_s:
                due.append(name)
        return due

    def run_due(self) -> list[dict]:
        self._busy = self._busy_tables()
        due = self.due()
        due += [name for name in self.search_indexes.due(self.store.tables) if name not in due]
        for name in sorted(TAIL_MERGED - set(due)):  # first: the other tables' upkeep can take seconds
            self.compact_tail(name)
        results = []
        for name in due:
            results.append(self.optimize(name))
            # An upkeep takes seconds under load (5 s of agent_steps' beside the
            # suite), and the steps' commits kept adding a fragment each: 206
            # piled up before the next round.  Merge what came meanwhile.
            for tail in sorted(TAIL_MERGED):
                self.compact_tail(tail)
        return results

    def _busy_tables(self) -> set[str]:
        """Tables this process committed to faster than BUSY_COMMITS_PER_S since the last round."""
        now, busy = time.monotonic(), set()
        counts = dict(self.store.writer.stats.by_table)
        for name in self.store.tables:
            count = counts.get(name, 0)
            then = self._commit_marks.get(name)
            if then is not None and (count - then[1]) / max(now - then[0], 1e-3) > BUSY_COMMITS_PER_S:
                busy.add(name)
            self._commit_marks[name] = (now, count)
        return busy

    def _hold_from_first_try(self, name: str) -> bool:
        return name not in APPEND_ONLY or name in self._busy

    def compact_tail(self, name: str) -> bool:
        """Merge the small fragments that commits added since the last run into
        one, if there are ``TAIL_EVERY_VERSIONS`` new versions; True if it ran.

        Only on the tables of :data:`TAIL_MERGED`.  On an append-only one the
        merge's rewrite runs beside the appends and only its commit holds them
        (:meth:`_compact`); the action queue's merge holds its commit lock
        throughout (a claim would preempt it).  A merge that loses a race anyway is left to the next
        round (the full upkeep compacts everything in any case); it is not a
        failed maintenance run."""
        table = self.store.tables.get(name)
        if table is None or name not in TAIL_MERGED:
            return False
        version = table.version
        if version - self._tail_version.get(name, 0) < TAIL_EVERY_VERSIONS:
            return False
        self._tail_version[name] = version
        hold_lock = self._hold_from_first_try(name)
        started = time.perf_counter()
        try:
            with self._commits_held(name, table, hold_lock):
                self._compact(name, table, TAIL_TARGET_ROWS, held=hold_lock)
        except (RuntimeError, OSError, ValueError) as exc:
            seconds = time.perf_counter() - started
            level = logging.WARNING if not is_conflict(exc) else logging.INFO if seconds >= SLOW_S else logging.DEBUG
            log.log(level, "merging the small fragments of %s (%.1f s): %s", name, seconds, str(exc)[:200])
            return False
        if time.perf_counter() - started >= SLOW_S:
            log.info("merging the small fragments of %s took %.1f s", name, time.perf_counter() - started)
        self._tail_version[name] = table.version  # the merge's own commit is not new work
        self.tables[name].tail_compactions += 1
        return True

    def optimize(self, name: str) -> dict:
        """Compact, clean up and re-index one table; retried until it commits or runs out of tries."""
        table, health = self.store.tables[name], self.tables.setdefault(name, TableHealth())
        started = time.perf_counter()
        error = None
        for attempt in range(1, self.attempts + 1):
            tried_at = time.perf_counter()
            try:
                self._optimize_once(name, table, hold_lock=attempt > 1 or self._hold_from_first_try(name))
                error = None
                break
            except (RuntimeError, OSError, ValueError) as exc:
                error = exc
                self.failures += 1
                health.failures += 1
                if not is_conflict(exc):
                    break
                log.info("maintenance of %s lost a commit race (try %d of %d, %.1f s); trying again with the "
                         "table's commits held back: %s", name, attempt, self.attempts,
                         time.perf_counter() - tried_at, str(exc)[:200])
                time.sleep(0.05 * attempt)
        seconds = time.perf_counter() - started
        self._last_run[name] = time.monotonic()
        health.runs += 1
        health.last_run_at = datetime.now(timezone.utc)
        health.last_seconds = seconds
        self.runs += 1
        self.seconds += seconds
        if error is not None:
            return self._abandoned(name, health, error)
        self._last_version[name] = table.version
        health.shape = table_shape(table)
        health.last_ok_at, health.last_error, health.consecutive_abandoned = health.last_run_at, None, 0
        log.info("maintenance %s: fragments %d, versions %d, %.2f s", name, health.shape["fragments"],
                 health.shape["versions"], seconds)
        self._warn_if_unhealthy(name, health.shape)
        return {"table": name, "ok": True, "seconds": seconds, "after": health.shape}

    def _optimize_once(self, name: str, table, *, hold_lock: bool) -> None:
        """Compact the small fragments, index the new rows, remove old versions.

        With ``hold_lock`` (every try but the first of an append-only table),
        this process's committer for the table waits for the compaction and
        the index commit instead of racing them; without it, it waits only for
        the compaction's commit (see :meth:`_compact`).  Cleanup commits
        nothing, so it runs outside the lock."""
        with self._commits_held(name, table, hold_lock):
            self._compact(name, table, COMPACT_TARGET_ROWS, held=hold_lock)
            dataset = table.to_lance(session=upkeep_session())
            if dataset.list_indices():
                dataset.optimize.optimize_indices(num_indices_to_merge=indices_to_merge(dataset))
        dataset.cleanup_old_versions(older_than=self.keep_versions)

    def _compact(self, name: str, table, target_rows: int, *, held: bool) -> None:
        """Compact the table's small fragments: rewrite them, then commit.

        The rewrite writes new files only and runs while steps keep committing;
        the commit then holds this process's committer for the table (unless
        the caller holds it already), so it rebases once over what landed
        meanwhile instead of racing every new append.  Racing them, an unheld
        compaction of agent_steps lost to ~20 appends a second for 30 s at a
        time in the hour-long soak, and the fragments piled up past 1,000
        before a held retry (which held the steps for 18-50 s) went through."""
        dataset = table.to_lance(session=upkeep_session())
        options = CompactionOptions(target_rows_per_fragment=target_rows)
        plan = Compaction.plan(dataset, options)
        if not plan.tasks:
            return
        rewrites = [task.execute(dataset) for task in plan.tasks]
        if held:
            Compaction.commit(dataset, rewrites, options)
            return
        with self.store.writer.table_lock(name):
            Compaction.commit(dataset, rewrites, options)

    @contextmanager
    def _commits_held(self, name: str, table, hold: bool):
        """With ``hold``, this process's committer for the table waits until the
        block is done, and the block starts from the table's latest version."""
        if not hold:
            yield
            return
        with self.store.writer.table_lock(name):
            table.checkout_latest()
            yield

    def _abandoned(self, name: str, health: TableHealth, error: Exception) -> dict:
        """Every try failed.  The table stays due, so the next round tries again."""
        self.abandoned += 1
        health.abandoned += 1
        health.consecutive_abandoned += 1
        health.last_error = str(error)[:500]
        log.error("maintenance of %s failed after %d tries (%d runs in a row): %s", name, self.attempts,
                  health.consecutive_abandoned, health.last_error)
        return {"table": name, "ok": False, "error": health.last_error}

    def _warn_if_unhealthy(self, name: str, shape: dict) -> None:
        if shape["fragments"] > self.warn_fragments or shape["versions"] > self.warn_versions:
            log.warning("table %s is falling behind: %d fragments (warn above %d), %d versions (warn above %d)",
                        name, shape["fragments"], self.warn_fragments, shape["versions"], self.warn_versions)

    def health(self) -> dict:
        """Per table: its shape after the last run and how the runs went (for metrics and heartbeats)."""
        return {name: health.as_dict() for name, health in self.tables.items()}


def indices_to_merge(dataset) -> int:
    """``num_indices_to_merge`` for this run: 0 (a new delta segment per index)
    until some index has ``MAX_INDEX_SEGMENTS`` segments; then its deltas alone,
    or everything once the deltas are ``FULL_MERGE_RATIO`` of the base."""
    widest = max(dataset.describe_indices(), key=lambda ix: len(ix.segments))
    segments = len(widest.segments)
    if segments < MAX_INDEX_SEGMENTS:
        return 0
    sizes = sorted((seg.size_bytes or 0 for seg in widest.segments), reverse=True)
    base, deltas = sizes[0], sum(sizes[1:])
    return segments if deltas >= FULL_MERGE_RATIO * base else segments - 1


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None
