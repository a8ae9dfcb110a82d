"""The background chores of the record, wired into agents.py:
the archive (summaries) and embeddings for semantic search when an endpoint
is configured.  None of them runs on a step's path: they read what steps
committed and write their own rows.  (Folding new rows into the FTS indexes
is the maintainer's: store.search.SearchIndexWatch.)
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from runtime.archive import Archiver
from semantic.embedder import Embedder
from semantic.embeddings import EmbeddingClient
from semantic.hybrid import Semantic
from tools import search_history

if TYPE_CHECKING:
    from runtime.service import AgentService
    from semantic.embeddings import EmbeddingSettings
    from store import Store

log = logging.getLogger("runtime.record")


def semantic_search(store: Store, settings: EmbeddingSettings | None) -> Embedder | None:
    """With an embeddings endpoint configured: hybrid search on ``store`` (for
    the API and the search_history tool), and the embedder agents.py runs."""
    if settings is None:
        return None
    client = EmbeddingClient(settings)
    store.semantic = Semantic(store, client)
    log.info("semantic search on: model %s (%d dimensions) at %s", settings.model, settings.dim, settings.base_url)
    return Embedder(store, client, max_backoff_s=settings.max_backoff_s)


class RecordKeeping:
    def __init__(self, service: AgentService, store: Store, *, worker_id: str, quiet_s: float, every_s: float,
                 embedder: Embedder | None = None):
        self.store = store
        self.archiver = Archiver(store, worker_id=worker_id, quiet_s=quiet_s, every_s=every_s)
        self.embedder = embedder
        service.observers.add(self.archiver)
        # Retention asks the archive for missing summaries before removing sessions.
        service.monitor.archiver = self.archiver
        # The search_history tool, in the service's tool registry once it has one
        # (StepFrame-v1 tool calls); a session may call it only when its
        # config lists it in ``tools``.
        registry = getattr(service, "tools", None)
        if registry is not None and hasattr(registry, "register") and search_history.NAME not in registry:
            registry.register(search_history.build(store))

    async def run(self, stopping: asyncio.Event) -> None:
        chores = [self.archiver.run(stopping)]
        if self.embedder is not None:
            chores.append(self.embedder.run(stopping))
        await asyncio.gather(*chores)

    async def close(self) -> None:
        await self.archiver.close()
