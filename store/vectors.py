"""Embedding vectors of searchable rows, for semantic search.

One table per vector size, ``embeddings_<dim>`` (a fixed-size vector column
cannot change size), one row per (model, kind, source row), keyed by
``"<model>|<kind>|<source id>"`` and upserted, so embedding a row twice (two
workers, a retry) keeps one.  The row copies the source's filter columns
(agent, session, conversation, status, time) so that filters apply to the
vector search without a join.  A vector index (IVF-PQ) is built once the
table holds ``index_after`` rows; rows added later are scanned until the
maintainer's optimize folds them in.
"""
import logging
import re

import pyarrow as pa
from lancedb.index import Bitmap, BTree, IvfPq

from store import codec, filters, query
from store.schemas import TS

log = logging.getLogger("store.vectors")

MODEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,199}$")


def table_name(dim: int) -> str:
    return f"embeddings_{int(dim)}"


def schema(dim: int) -> pa.Schema:
    return pa.schema([
        pa.field("id", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("source_id", pa.string(), nullable=False),
        pa.field("created_at", TS, nullable=False),  # the source row's
        pa.field("agent_id", pa.string()),
        pa.field("session_id", pa.string()),
        pa.field("conversation_id", pa.string()),
        pa.field("status", pa.string()),
        pa.field("vector", pa.list_(pa.float32(), int(dim)), nullable=False),
    ])


INDEXES = [("source_id", "btree"), ("kind", "bitmap"), ("model", "bitmap")]


def check_model(model: str) -> str:
    if not isinstance(model, str) or not MODEL_PATTERN.fullmatch(model):
        raise ValueError(f"embedding model name must match {MODEL_PATTERN.pattern}")
    return model


class VectorTable:
    key = "id"

    def __init__(self, table, writer, dim: int, model: str, index_after: int = 50_000):
        self.table = table
        self.writer = writer
        self.name = table_name(dim)
        self.dim = dim
        self.model = check_model(model)
        self.index_after = index_after

    def ensure_indexes(self) -> None:
        """Scalar indexes for the filters, and the primary key that keeps upserts from duplicating."""
        if not self.table.schema.field("id").metadata:
            try:
                self.table.set_unenforced_primary_key("id")
            except Exception as exc:  # another process declared it first
                log.debug("primary key on %s: %s", self.name, exc)
        have = {tuple(ix.columns) for ix in self.table.list_indices()}
        for column, kind in INDEXES:
            if (column,) not in have:
                try:
                    self.table.create_index(column, config=BTree() if kind == "btree" else Bitmap())
                except Exception as exc:  # another process created it first, most likely
                    log.debug("index %s.%s: %s", self.name, column, exc)

    def submit(self, rows: list[dict]):
        """Queue vectors ``{kind, source_id, created_at, agent_id, session_id, conversation_id, status, vector}``."""
        stored = [{**r, "model": self.model, "id": f"{self.model}|{r['kind']}|{r['source_id']}"} for r in rows]
        return self.writer.submit_upsert(self.name, self.key, stored)

    def _mine(self, kind: str | None = None) -> str:
        clause = f"model = {filters.quote(self.model)}"  # checked against MODEL_PATTERN
        return filters.all_of(clause, filters.eq_id("kind", kind)) if kind else clause

    def embedded(self, kind: str, source_ids: list[str]) -> set[str]:
        if not source_ids:
            return set()
        where = filters.all_of(self._mine(kind), filters.in_ids("source_id", source_ids))
        return {r["source_id"] for r in query.rows(self.table, self.name, where, columns=["source_id"],
                                                   limit=len(source_ids))}

    def newest(self, kind: str) -> str | None:
        """The creation time of the newest source row of ``kind`` embedded (a cursor)."""
        row = query.first(self.table, self.name, self._mine(kind), order=[("created_at", False)])
        return row["created_at"] if row else None

    def count(self) -> int:
        return query.count(self.table, self._mine())

    def nearest(self, vector: list[float], where: str | None, limit: int) -> list[dict]:
        """The ``limit`` nearest rows (cosine distance) of this model matching ``where``."""
        where = filters.all_of(self._mine(), where)

        def read():
            # refine_factor: the index's candidates are re-ranked by their exact distance.
            return (self.table.search(vector, vector_column_name="vector").distance_type("cosine")
                    .refine_factor(5).where(where, prefilter=True).select(["kind", "source_id", "created_at", "_distance"])
                    .limit(limit).to_list())
        return [codec.decode(self.name, r) for r in query.retrying(self.table, read)]

    def ensure_vector_index(self) -> bool:
        """Build the IVF-PQ index once the table is large enough; True when it was built now."""
        if any(tuple(ix.columns) == ("vector",) for ix in self.table.list_indices()):
            return False
        rows = self.table.count_rows()
        if rows < self.index_after:
            return False
        # ~sqrt(n) partitions, but with enough rows to train each (Lance wants ~256).
        partitions = max(1, min(int(rows ** 0.5), rows // 256))
        sub_vectors = next((self.dim // d for d in (8, 4, 2, 1) if self.dim % d == 0), 1)
        self.table.create_index("vector", config=IvfPq(distance_type="cosine", num_partitions=partitions,
                                                       num_sub_vectors=sub_vectors))
        log.info("built IVF-PQ index on %s (%d rows, %d partitions)", self.name, rows, partitions)
        return True
