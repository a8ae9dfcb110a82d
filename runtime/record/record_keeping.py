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
    from store import Store
    from tools.tool_registry import ToolRegistry


class RecordKeeping:
    """The archive and the embedder.  agents.py wires the archiver where it is
    needed (an observer of the service, and the monitor's: retention asks it
    for missing summaries before removing sessions); nothing here reaches into
    the service."""

    def __init__(self, store: Store, tools: ToolRegistry, *, worker_id: str, quiet_s: float, every_s: float,
                 embedder: Embedder | None = None):
        self.store = store
        self.archiver = Archiver(store, worker_id=worker_id, quiet_s=quiet_s, every_s=every_s)
        self.embedder = embedder
        # The search_history tool (StepFrame-v1 tool calls); a session may call
        # it only when its config lists it in ``tools``.
        if search_history.NAME not in tools:
            tools.register(search_history.build(catalog.history_search(store)))

    async def run(self, stopping: asyncio.Event) -> None:
        chores = [self.archiver.run(stopping)]
        if self.embedder is not None:
            chores.append(self.embedder.run(stopping))
        await asyncio.gather(*chores)

    async def close(self) -> None:
        await self.archiver.close()
