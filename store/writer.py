"""The single path every write to LanceDB takes.

Keeping appends, updates and upserts behind one object means batching (group
commit) and write metrics have exactly one place to live.  Writes to the same
table from one process are serialised with a lock: Lance would retry the
conflicting commits anyway, but serialising is cheaper than conflicting.

Two rules from FACTS.md are enforced here:
- empty changes are never committed (an update or add of nothing still writes
  a new table version);
- rows are never written with ``mode="overwrite"``.
"""
import logging
import threading
from collections import defaultdict

import pyarrow as pa

from store import codec

log = logging.getLogger("store.writer")


class Writer:
    def __init__(self, tables: dict):
        self._tables = tables
        self._schemas = {name: table.schema for name, table in tables.items()}
        self._locks = defaultdict(threading.Lock)
        self.commits = 0

    def _batch(self, table: str, rows: list[dict]) -> pa.Table:
        """Typed by the table's own schema: an inferred schema would make every
        column nullable, which the declared primary keys refuse."""
        return pa.Table.from_pylist([codec.encode(table, r) for r in rows], schema=self._schemas[table])

    def append(self, table: str, rows: list[dict]) -> None:
        if not rows:
            return
        batch = self._batch(table, rows)
        with self._locks[table]:
            self._tables[table].add(batch)
            self.commits += 1

    def update(self, table: str, where: str, values: dict) -> int:
        """Update matching rows; returns how many matched.  ``where`` must come
        from :mod:`store.filters`."""
        if not values:
            return 0
        encoded = codec.encode(table, values)
        with self._locks[table]:
            result = self._tables[table].update(where=where, values=encoded)
            self.commits += 1
        return result.rows_updated

    def update_sql(self, table: str, where: str, values_sql: dict) -> int:
        """Update with SQL expressions as values (e.g. ``attempts + 1``).  The
        expressions are constants of the store, never input."""
        with self._locks[table]:
            result = self._tables[table].update(where=where, values_sql=values_sql)
            self.commits += 1
        return result.rows_updated

    def upsert(self, table: str, key: str, rows: list[dict]) -> None:
        """Insert or replace whole rows by ``key`` (the table's declared primary key)."""
        if not rows:
            return
        batch = self._batch(table, rows)
        with self._locks[table]:
            (
                self._tables[table]
                .merge_insert(key)
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(batch)
            )
            self.commits += 1

    def delete(self, table: str, where: str) -> None:
        with self._locks[table]:
            self._tables[table].delete(where)
            self.commits += 1
