"""Hybrid search: the full-text ranking and the vector ranking fused by
reciprocal rank (each list contributes 1 / (k + rank) to a hit's score).

Used by ``GET /api/search`` (app.py) and the ``search_history`` tool
(agents.py) when an embeddings endpoint is configured.  If the query cannot be
embedded (the endpoint is down), the answer is the full-text one and the
reason says why: search never fails because of embeddings.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from semantic.embeddings import EmbeddingClient, EmbeddingError
from store import search as store_search

if TYPE_CHECKING:
    from store import Store

log = logging.getLogger("semantic.hybrid")

RRF_K = 60


class Semantic:
    def __init__(self, store: Store, client: EmbeddingClient, rrf_k: int = RRF_K):
        self.store = store
        self.client = client
        self.rrf_k = rrf_k

    def hybrid(self, tables: dict, q: store_search.SearchQuery, text: str) -> tuple[list[dict], str | None]:
        """(hits, None), or (full-text hits, the reason there is no vector part)."""
        wide = replace(q, limit=q.limit * 2)
        fts_hits = store_search.fts(tables, wide)
        try:
            vector = self.client.embed([text])[0]
        except EmbeddingError as exc:
            log.warning("semantic search unavailable, answering with full text only: %s", exc)
            return fts_hits[:q.limit], f"query embedding failed: {exc}"
        where = store_search.vector_where(q)
        near = [] if where is False else self.store.vectors.nearest(vector, where, wide.limit)
        return self._fuse(tables, q, fts_hits, near), None

    def _fuse(self, tables, q, fts_hits: list[dict], near: list[dict]) -> list[dict]:
        by_key: dict[tuple, dict] = {}
        for rank, hit in enumerate(fts_hits, 1):
            by_key[(hit["kind"], hit["id"])] = {**hit, "ranks": {"fts": rank, "vector": None},
                                                "score": 1 / (self.rrf_k + rank)}
        missing: dict[str, list[str]] = {}
        for rank, row in enumerate(near, 1):
            key = (row["kind"], row["source_id"])
            if key in by_key:
                by_key[key]["ranks"]["vector"] = rank
                by_key[key]["score"] += 1 / (self.rrf_k + rank)
            else:
                by_key[key] = {"ranks": {"fts": None, "vector": rank}, "score": 1 / (self.rrf_k + rank),
                               "distance": row.get("_distance")}
                missing.setdefault(row["kind"], []).append(row["source_id"])
        for kind, ids in missing.items():  # vector-only hits: read their rows for the snippet
            source = store_search.source_of(kind)
            for row in store_search.rows_by_id(tables, kind, ids):
                key = (kind, row[source.id_column])
                extra = by_key[key]
                by_key[key] = {**store_search.hit_of(source, row, q.terms), **extra}
        hits = [h for h in by_key.values() if "kind" in h]  # a vector whose row is gone (retention) drops out
        for hit in hits:
            hit["score"] = round(hit["score"], 6)
        hits.sort(key=lambda h: -h["score"])
        return hits[:q.limit]
