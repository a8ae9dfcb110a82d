"""The background embedder of agents.py: vectors for every searchable row,
computed in batches, never on a step's path.

Each round reads, per source table, the rows created since the newest one
already embedded (a cursor per kind, recovered from the vectors table on
start), skips those already embedded (the cursor row itself, rows of the same
instant), asks the endpoint for a batch of vectors and upserts them.  When the
endpoint fails, the round ends, the cursor stays, and the next round (after a
backoff that grows to ``max_backoff_s``) tries the same rows again: steps
never wait for or fail because of embeddings, and embeddings catch up when the
endpoint is back.  A row committed long after its ``created_at`` (more than
the cursor has moved on) is not picked up; rows are committed within
milliseconds to seconds of being stamped, so this needs a very stalled store.
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from semantic.embeddings import EmbeddingClient, EmbeddingError
from store import search as store_search

if TYPE_CHECKING:
    from store import Store

log = logging.getLogger("semantic.embedder")


class Embedder:
    def __init__(self, store: Store, client: EmbeddingClient, *, every_s: float = 1.0, max_backoff_s: float = 60.0,
                 pages_per_round: int = 20):
        self.store = store
        self.client = client
        self.every_s = every_s
        self.max_backoff_s = max_backoff_s
        self.pages_per_round = pages_per_round
        self.batch = client.settings.batch
        self._cursor: dict[str, datetime | None] = {}
        self.embedded = 0
        self.failures = 0

    async def run(self, stopping: asyncio.Event) -> None:
        delay = self.every_s
        while not stopping.is_set():
            try:
                await self.round()
                delay = self.every_s
            except EmbeddingError as exc:
                self.failures += 1
                delay = min(self.max_backoff_s, max(delay * 2, self.every_s))
                log.warning("embeddings endpoint failed (%s); trying again in %.1fs", exc, delay)
            except Exception:
                self.failures += 1
                delay = min(self.max_backoff_s, max(delay * 2, self.every_s))
                log.exception("embedding round failed; trying again in %.1fs", delay)
            try:
                await asyncio.wait_for(stopping.wait(), timeout=delay)
            except TimeoutError:
                pass

    async def round(self) -> int:
        """Embed what is new, up to ``pages_per_round`` batches per source; returns how many rows."""
        done = 0
        for source in store_search.present_sources(self.store.tables):
            for _ in range(self.pages_per_round):
                embedded, advanced = await self._page(source)
                done += embedded
                if not advanced:
                    break
        if done:
            await asyncio.to_thread(self.store.vectors.ensure_vector_index)
        return done

    async def _page(self, source) -> tuple[int, bool]:
        """One batch of one source: (rows embedded, whether the cursor moved)."""
        since = await self._since(source.kind)
        rows = await asyncio.to_thread(store_search.rows_since, self.store.tables, source, since, self.batch * 2)
        if not rows:
            return 0, False
        have = await asyncio.to_thread(self.store.vectors.embedded, source.kind, [r[source.id_column] for r in rows])
        fresh = [(r, text) for r in rows if r[source.id_column] not in have
                 and (text := store_search.text_for_embedding(source, r)).strip()]
        chunk = fresh[:self.batch]
        if chunk:
            vectors = await asyncio.to_thread(self.client.embed, [text for _, text in chunk])
            await asyncio.wrap_future(self.store.vectors.submit([
                {"kind": source.kind, "source_id": r[source.id_column], "created_at": _parse(r["created_at"]),
                 "agent_id": r.get("agent_id"), "session_id": r.get("session_id"),
                 "conversation_id": r.get("conversation_id"), "status": r.get("status"), "vector": vector}
                for (r, _), vector in zip(chunk, vectors)]))
            self.embedded += len(chunk)
        # Rows up to here are done (embedded now or before, or without text); the
        # cursor is inclusive, so rows of its exact instant are read again and skipped.
        last = chunk[-1][0] if len(fresh) > len(chunk) else rows[-1]
        newest = _parse(last["created_at"])
        if since is not None and newest <= since:
            if chunk:
                return len(chunk), True
            newest = since + timedelta(microseconds=1)  # a page full of one instant, all done: step past it
        self._cursor[source.kind] = newest
        return len(chunk), True

    async def _since(self, kind: str) -> datetime | None:
        if kind not in self._cursor:
            newest = await asyncio.to_thread(self.store.vectors.newest, kind)
            self._cursor[kind] = _parse(newest) if newest else None
        return self._cursor[kind]


def _parse(value) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
