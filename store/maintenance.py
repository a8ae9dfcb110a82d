"""Keeping tables small and fast while they are written to all the time.

Every commit writes a new table version; without upkeep, fragments and
versions pile up and each query and commit gets slower (FACTS.md: 10,000
single-row commits left 4.4 GB of manifests and a 1.8 s poll).  ``Maintainer``
compacts small fragments, folds new rows into the indexes and removes versions
older than a window, table by table, when enough versions have accumulated
since it last did so.  It is driven by agents.py in a background thread.

Cleanup keeps a window (default 2 minutes) because a reader still holding an
old version fails when its files vanish (FACTS.md).  Compaction can lose a race
with a concurrent update ("Retryable commit conflict"); it is retried, the last
time while holding this process's commit lock for the table.
"""
import logging
import time
from datetime import timedelta

from lancedb.index import Bitmap, BTree

from store.schemas import INDEXES

log = logging.getLogger("store.maintenance")

INDEX_CONFIGS = {"bitmap": Bitmap, "btree": BTree}


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


class Maintainer:
    def __init__(self, store, *, every_versions: int = 100, min_interval_s: float = 10.0,
                 keep_versions_s: float = 120.0, attempts: int = 3):
        self.store = store
        self.every_versions = every_versions
        self.min_interval_s = min_interval_s
        self.keep_versions = timedelta(seconds=keep_versions_s)
        self.attempts = attempts
        self._last_version: dict[str, int] = {}
        self._last_run: dict[str, float] = {}
        self.runs = 0
        self.failures = 0
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
        return [self.optimize(name) for name in self.due()]

    def optimize(self, name: str) -> dict:
        table = self.store.tables[name]
        before = _shape(table)
        started = time.perf_counter()
        for attempt in range(1, self.attempts + 1):
            try:
                if attempt < self.attempts:
                    table.optimize(cleanup_older_than=self.keep_versions)
                else:  # last try: keep this process's writers out of the way
                    with self.store.writer.table_lock(name):
                        table.optimize(cleanup_older_than=self.keep_versions)
                break
            except RuntimeError as exc:
                if "conflict" not in str(exc).lower() or attempt == self.attempts:
                    self.failures += 1
                    log.error("maintenance of %s failed (attempt %d): %s", name, attempt, exc)
                    return {"table": name, "ok": False, "error": str(exc)}
                time.sleep(0.05 * attempt)
        seconds = time.perf_counter() - started
        after = _shape(table)
        self._last_version[name] = table.version
        self._last_run[name] = time.monotonic()
        self.runs += 1
        self.seconds += seconds
        log.info("maintenance %s: fragments %d -> %d, versions %d -> %d, %.2f s", name, before["fragments"],
                 after["fragments"], before["versions"], after["versions"], seconds)
        return {"table": name, "ok": True, "seconds": seconds, "before": before, "after": after}


def _shape(table) -> dict:
    stats = table.stats()
    return {"fragments": stats["fragment_stats"]["num_fragments"], "versions": len(table.list_versions()),
            "rows": stats["num_rows"], "bytes": stats["total_bytes"]}
