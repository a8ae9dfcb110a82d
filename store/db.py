"""Opening the database and its tables.

A connection opened with LanceDB's default ``read_consistency_interval=None``
never sees writes made by another process: it keeps reading the version it
opened.  agents.py and app.py are separate processes sharing one database, so
every connection here re-checks the latest table version on each read
(interval 0, a few ms a query).

LanceDB's default caches (index and metadata) are sized for analytics, not for
a long-running service: they keep every manifest they have read, so a process
grew by about a gigabyte per few thousand versions (measured in the
sustained-load soak, BENCHMARKS.md §4b).  Each Store opens its connection with
its own :class:`lancedb.Session` whose caches are capped at ``cache_mb`` each.
4 MiB, not more: a process's RSS grows by 2-3x what the caches account for
while they fill (allocator overhead), and in a 20-minute soak agents.py was
still growing at 16 MiB; at 2-4 MiB it was flat after ~4 minutes, and session
pages were as fast (BENCHMARKS.md §4c).

The index cache may be given a size of its own (``index_cache_mb``): a page of
steps reads a few pages of the BTREE index, and which ones depends on the
session and where in its history the page is.  Once agent_steps holds ~1.4 M
rows, a reader of many sessions' pages (app.py) needs ~16 MiB to keep them:
with 4 MiB a page took 5.8 ms against 5.0 ms, in a quiet process
(BENCHMARKS.md §4f).
"""
import logging
import os
from datetime import timedelta

import lancedb

from store import vectors
from store.actions import ActionQueue
from store.conversations import Conversations
from store.evals import EvalTables
from store.maintenance import ensure_indexes, table_shape
from store.model_io import ModelIOTable
from store.schemas import DERIVED_COLUMNS, PRIMARY_KEYS, TABLES
from store.search import ensure_search_indexes
from store.state import StateTable
from store.steps import StepLog
from store.summaries import SummaryTable
from store.tool_calls import ToolCallTable
from store.tool_catalog import ToolCatalogTable
from store.turns import TurnTable
from store.rate_ledger import RateLedger
from store.workers import WorkerTable
from store.commit_lock import lock_dir_for
from store.writer import DEFAULT_MIN_COMMIT_INTERVAL_S, Writer

log = logging.getLogger("store")

MIB = 1024 * 1024
DEFAULT_CACHE_MB = 4  # per cache (index, metadata) and per process


def lance_session(cache_mb: int, index_cache_mb: int | None = None) -> lancedb.Session:
    """A LanceDB session whose caches hold at most ``cache_mb`` MiB each (the index
    cache ``index_cache_mb``, when given); ``cache_mb`` 0 keeps LanceDB's defaults."""
    if not cache_mb:
        return lancedb.Session()
    index_mb = cache_mb if index_cache_mb is None else index_cache_mb
    return lancedb.Session(index_cache_size_bytes=index_mb * MIB, metadata_cache_size_bytes=cache_mb * MIB)


class Store:
    """The database of one service: its tables and the helpers over them."""

    def __init__(self, uri: str, storage_options: dict | None = None, read_consistency_s: float = 0.0,
                 cache_mb: int = DEFAULT_CACHE_MB, min_commit_interval_s: float = DEFAULT_MIN_COMMIT_INTERVAL_S,
                 embedding: dict | None = None, index_cache_mb: int | None = None, commit_turns: bool = False):
        """``embedding``: ``{"dim", "model"}`` when semantic search is configured
        (adds the ``embeddings_<dim>`` table, see store/vectors.py).
        ``commit_turns``: this process's commits to a table take turns with the
        other processes' on this machine that open the store so
        (store/commit_lock.py): agents.py's workers do; app.py, whose writes are
        mostly appends to the queue that never conflict, does not wait for a
        worker's upkeep to accept a control.
        ``cache_mb``: each LanceDB cache's size, MiB (0 keeps LanceDB's own
        sizes, for comparison: they grow with the versions read);
        ``index_cache_mb``: the index cache's, when it should differ."""
        self.uri = uri
        self.session = lance_session(cache_mb, index_cache_mb)
        self.db = lancedb.connect(
            uri,
            read_consistency_interval=timedelta(seconds=read_consistency_s),
            storage_options=storage_options,
            session=self.session,
        )
        schemas = dict(TABLES)
        if embedding:
            schemas[vectors.table_name(embedding["dim"])] = vectors.schema(embedding["dim"])
        self.tables = {name: self._open_or_create(name, schema) for name, schema in schemas.items()}
        ensure_indexes(self.tables)
        ensure_search_indexes(self.tables)
        self.writer = Writer(self.tables, min_commit_interval_s=min_commit_interval_s,
                             lock_dir=lock_dir_for(uri) if commit_turns else None)
        self.actions = ActionQueue(self.tables["actions"], self.writer, self._local_dir("actions", "_versions"))
        self.states = StateTable(self.tables["agent_state"], self.writer)
        self.steps = StepLog(self.tables["agent_steps"], self.writer)
        self.workers = WorkerTable(self.tables["workers"], self.writer)
        self.conversations = Conversations(self.tables, self.writer)
        self.tool_calls = ToolCallTable(self.tables["tool_calls"], self.writer)
        self.tool_catalog = ToolCatalogTable(self.tables["tool_catalog"], self.writer)
        self.summaries = SummaryTable(self.tables["summaries"], self.writer)
        self.turns = TurnTable(self.tables["turns"], self.writer)
        self.model_io = ModelIOTable(self.tables["model_io"], self.writer)  # what the model saw (issue 40)
        self.rate_ledger = RateLedger(self.tables["rate_ledger"], self.writer)
        self.evals = EvalTables(self.tables, self.writer)  # eval sets, runs and scores (issue 29)
        self.vectors = None
        if embedding:
            name = vectors.table_name(embedding["dim"])
            self.vectors = vectors.VectorTable(self.tables[name], self.writer, embedding["dim"], embedding["model"],
                                               index_after=embedding.get("index_after", 50_000))
            self.vectors.ensure_indexes()
        self.semantic = None  # set by the entry points when an embeddings endpoint is configured

    def _open_or_create(self, name, schema):
        try:
            table = self.db.open_table(name)
        except (FileNotFoundError, ValueError):
            # exist_ok makes two processes bootstrapping at once both succeed...
            try:
                table = self.db.create_table(name, schema=schema, exist_ok=True)
            except ValueError:
                # ...unless the other one has also declared the primary key by now: the
                # schemas then differ in that key's metadata ("Provided schema does not
                # match existing table schema"; agents.py died of it on a fresh directory).
                table = self.db.open_table(name)
        self._add_missing_columns(name, table, schema)
        key = PRIMARY_KEYS.get(name)
        if key and not table.schema.field(key).metadata:
            try:
                table.set_unenforced_primary_key(key)
            except Exception as exc:  # another process declared it first
                log.debug("primary key on %s: %s", name, exc)
        return table

    @staticmethod
    def _add_missing_columns(name, table, schema) -> None:
        """Schema migration: columns added to a table's schema since it was
        created are added as nulls, or computed from the row when they are
        derived (schemas.DERIVED_COLUMNS).  (Processes still running the old schema
        must be restarted: LanceDB refuses their appends, which lack the new columns.)"""
        missing = [field for field in schema if field.name not in table.schema.names]
        if not missing:
            return
        derived = DERIVED_COLUMNS.get(name, {})
        computed = {f.name: derived[f.name][1] for f in missing if f.name in derived}
        nulls = [f for f in missing if f.name not in derived]
        try:
            if nulls:
                table.add_columns(nulls)
            if computed:  # filled in for the existing rows from the columns they derive from
                table.add_columns(computed)
            log.warning("table %s: added columns %s", name, [f.name for f in missing])
        except Exception as exc:  # another process migrated it first
            log.debug("migrating %s: %s", name, exc)
            table.checkout_latest()

    @property
    def on_object_storage(self) -> bool:
        """Whether the database is on object storage (s3://, gs://, az://...), where
        every read and commit is a billed request and nothing can be watched."""
        return "://" in self.uri and not self.uri.startswith("file://")

    def _local_dir(self, table: str, *parts: str) -> str | None:
        """A folder of a table when the database is a local directory, else None."""
        if self.on_object_storage:
            return None
        root = self.uri.removeprefix("file://")
        path = os.path.join(root, f"{table}.lance", *parts)
        return path if os.path.isdir(path) else None

    def close(self) -> None:
        """Commit whatever is queued, then stop the committer threads."""
        self.writer.close()

    def table_shapes(self) -> dict[str, dict]:
        """Fragments, versions, rows and bytes of every table (a few ms each; cache it)."""
        return {name: table_shape(table) for name, table in self.tables.items()}

    def cache_bytes(self) -> int:
        """What LanceDB's caches of this store hold now."""
        return self.session.size_bytes

    def ping(self) -> bool:
        self.tables["actions"].count_rows()
        return True
