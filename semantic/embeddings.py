"""The embeddings endpoint: its settings and the client that asks it for
vectors.  The background embedder of agents.py (embedder.py) and the hybrid
query of app.py and the ``search_history`` tool (hybrid.py) both use it.

Settings come from the environment, in the style of the LLM's, and both
processes read the same ones:

=============================  ==========================================
AGENTSVC_EMBED_BASE_URL        an OpenAI-compatible endpoint; unset = FTS only
AGENTSVC_EMBED_MODEL           default ``text-embedding-3-small``
AGENTSVC_EMBED_DIM             the model's vector size (required, e.g. 1536)
AGENTSVC_EMBED_API_KEY         optional bearer key
AGENTSVC_EMBED_BATCH           texts per request, default 64
AGENTSVC_EMBED_TIMEOUT_S       per request, default 10
AGENTSVC_EMBED_INDEX_AFTER     build the vector index at this many rows, default 50000
AGENTSVC_EMBED_MAX_BACKOFF_S   longest wait between tries while the endpoint fails, default 30
=============================  ==========================================

Vectors are stored per model (store/vectors.py), so changing the model starts
a new set instead of mixing vector spaces.
"""
import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass

log = logging.getLogger("semantic.embeddings")

MAX_INPUT_CHARS = 8000


@dataclass(frozen=True)
class EmbeddingSettings:
    base_url: str
    model: str
    dim: int
    api_key: str = ""
    batch: int = 64
    timeout_s: float = 10.0
    index_after: int = 50_000
    max_backoff_s: float = 30.0

    @classmethod
    def from_env(cls, environ=os.environ) -> "EmbeddingSettings | None":
        base_url = environ.get("AGENTSVC_EMBED_BASE_URL")
        if not base_url:
            return None
        dim = environ.get("AGENTSVC_EMBED_DIM")
        if not dim or not dim.isdigit() or not 1 <= int(dim) <= 65_536:
            raise SystemExit("AGENTSVC_EMBED_DIM must be the embedding model's vector size (e.g. 1536)")
        return cls(base_url=base_url.rstrip("/"), model=environ.get("AGENTSVC_EMBED_MODEL") or "text-embedding-3-small",
                   dim=int(dim), api_key=environ.get("AGENTSVC_EMBED_API_KEY", ""),
                   batch=int(environ.get("AGENTSVC_EMBED_BATCH") or 64),
                   timeout_s=float(environ.get("AGENTSVC_EMBED_TIMEOUT_S") or 10),
                   index_after=int(environ.get("AGENTSVC_EMBED_INDEX_AFTER") or 50_000),
                   max_backoff_s=float(environ.get("AGENTSVC_EMBED_MAX_BACKOFF_S") or 30))

    def store_option(self) -> dict:
        return {"dim": self.dim, "model": self.model, "index_after": self.index_after}


class EmbeddingError(RuntimeError):
    pass


class EmbeddingClient:
    """``POST {base_url}/embeddings`` (OpenAI's shape), synchronous: call it from a thread."""

    def __init__(self, settings: EmbeddingSettings):
        self.settings = settings

    def embed(self, texts: list[str]) -> list[list[float]]:
        body = json.dumps({"model": self.settings.model, "input": [t[:MAX_INPUT_CHARS] for t in texts]}).encode()
        request = urllib.request.Request(self.settings.base_url + "/embeddings", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        if self.settings.api_key:
            request.add_header("Authorization", f"Bearer {self.settings.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise EmbeddingError(f"embeddings endpoint answered HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise EmbeddingError(f"embeddings endpoint unreachable: {exc}") from None
        try:
            vectors = [item["embedding"] for item in sorted(payload["data"], key=lambda d: d["index"])]
        except (KeyError, TypeError) as exc:
            raise EmbeddingError(f"embeddings endpoint answered an unexpected shape: {exc}") from None
        if len(vectors) != len(texts) or any(len(v) != self.settings.dim for v in vectors):
            raise EmbeddingError(f"embeddings endpoint returned {len(vectors)} vectors, expected {len(texts)} "
                                 f"of size {self.settings.dim}")
        return vectors
