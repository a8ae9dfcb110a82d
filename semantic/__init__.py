"""Semantic search: the embeddings endpoint (embeddings.py), the background
embedder of agents.py (embedder.py) and the hybrid query that fuses full-text
and vector rankings (hybrid.py).  Its table is store/vectors.py.

Both processes turn it on the same way, with :func:`semantic_search`.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from semantic.embedder import Embedder
from semantic.embeddings import EmbeddingClient
from semantic.hybrid import Semantic

if TYPE_CHECKING:
    from semantic.embeddings import EmbeddingSettings
    from store import Store

log = logging.getLogger("semantic")


def semantic_search(store: Store, settings: EmbeddingSettings | None) -> Embedder | None:
    """With an embeddings endpoint configured: hybrid search on ``store`` (for
    the API and the search_history tool), and the embedder agents.py runs."""
    if settings is None:
        return None
    client = EmbeddingClient(settings)
    store.semantic = Semantic(store, client)
    log.info("semantic search on: model %s (%d dimensions) at %s", settings.model, settings.dim, settings.base_url)
    return Embedder(store, client, max_backoff_s=settings.max_backoff_s)
