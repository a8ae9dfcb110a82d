"""The background chores of the record, wired into agents.py:
the archive (summaries) and embeddings for semantic search when an endpoint
is configured.  None of them runs on a step's path: they read what steps
committed and write their own rows.  (Folding new rows into the FTS indexes
is the maintainer's: store.search.SearchIndexWatch.)
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from runtime.record.archive import Archiver
from semantic.embedder import Embedder
from tools import catalog, search_history

if TYPE_CHECKING:
    from runtime.worker.service import AgentService
    from store import Store



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
            registry.register(search_history.build(catalog.history_search(store)))

    async def run(self, stopping: asyncio.Event) -> None:
        chores = [self.archiver.run(stopping)]
        if self.embedder is not None:
            chores.append(self.embedder.run(stopping))
        await asyncio.gather(*chores)

    async def close(self) -> None:
        await self.archiver.close()
