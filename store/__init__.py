"""All LanceDB access lives in this package.

Nothing outside ``store/`` opens a table or builds a filter string.  The rest of
the service sees plain dicts with JSON fields already decoded.
"""
from domain import ids
from store import lance_import, lance_log

lance_log.default_filter()  # before lancedb loads: it reads LANCEDB_LOG once
lance_import.import_lancedb()  # first, so that no submodule loads it without deferring (see lance_import)
ids.install()  # every process that writes rows imports the store: ids' random bits from a buffer

from store.db import Store  # noqa: E402
from store.filters import InvalidId, check_id

__all__ = ["Store", "InvalidId", "check_id"]
