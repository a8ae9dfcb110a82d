"""Small helpers for reading rows out of a table."""
import logging
import time

from lancedb.query import ColumnOrdering

from store import codec

log = logging.getLogger(__name__)

# A reader can lose a race with cleanup: it resolved the table's files at one
# version, and maintenance removed some of them (after compaction) before the
# read finished. The newest version never references removed files, so reading
# again is enough; a few tries cover even a busy machine.
VANISHED_FILE_RETRIES = 3


def _vanished_file(exc: Exception) -> bool:
    return isinstance(exc, (RuntimeError, OSError)) and "Not found" in str(exc)


def retrying(table, read, retries: int = VANISHED_FILE_RETRIES):
    """Run ``read()`` and run it again on the newest version if a file vanished.

    The pause doubles from 20 ms up to a second, so a caller that passes more
    ``retries`` outlasts a cleanup that is still deleting files."""
    for attempt in range(retries + 1):
        try:
            return read()
        except (RuntimeError, OSError) as exc:
            if not _vanished_file(exc) or attempt == retries:
                raise
            log.info("read of %s lost a race with cleanup (attempt %d); reading the newest version",
                     getattr(table, "name", "?"), attempt + 1)
            time.sleep(min(0.02 * 2 ** attempt, 1.0))
            table.checkout_latest()


def count(table, where: str | None = None) -> int:
    return retrying(table, lambda: table.count_rows(where) if where else table.count_rows())


def _build(table, where: str | None, order=(), limit: int | None = None, offset: int = 0, columns=None):
    q = table.search()
    if where:
        q = q.where(where)
    if order:
        q = q.order_by([ColumnOrdering(column_name=c, ascending=asc) for c, asc in order])
    if columns:
        q = q.select(list(columns))
    if offset:
        q = q.offset(offset)
    # A query without a limit gets LanceDB's default of 10 rows; "all" must be explicit.
    return q.limit(limit if limit is not None else max(table.count_rows(where) if where else table.count_rows(), 1))


def rows(table, name: str, where: str | None, order=(), limit: int | None = None,
         offset: int = 0, columns=None) -> list[dict]:
    read = lambda: _build(table, where, order, limit, offset, columns).to_list()  # noqa: E731
    return [codec.decode(name, r) for r in retrying(table, read)]


def indexed_rows(table, name: str, where: str, limit: int) -> list[dict]:
    """The rows matching ``where`` among those the table's indexes cover: the rows
    committed since the last index update are not read (Lance's ``fast_search``).

    Every commit between two upkeeps adds a small fragment that no index covers
    yet, and a filtered read scans each of them whole, ~0.5 ms apiece: with the
    ~30 a busy table carries, that was most of a page read (13 ms against 4 ms,
    BENCHMARKS.md §4h).  A caller that can tell whether the answer is complete (a window of
    a session's iterations, which have no gaps) reads here first and falls back
    to :func:`rows` when it is not.

    LanceDB's sync query builder offers ``fast_search()`` only for vector and
    full-text queries; the query object it builds carries the flag for a plain
    filter too, and the table runs it like any other."""
    def read():
        request = _build(table, where, limit=limit).to_query_object()
        request.fast_search = True
        return table._execute_query(request).read_all().to_pylist()
    return [codec.decode(name, r) for r in retrying(table, read)]


def plan(table, where: str | None, order=(), limit: int | None = None, offset: int = 0,
         analyze: bool = False, indexed_only: bool = False) -> str:
    """LanceDB's physical plan for the same query :func:`rows` (or, with
    ``indexed_only``, :func:`indexed_rows`) would run, for tests and diagnosis;
    with ``analyze``, run it and include what each part read."""
    def explain():
        request = _build(table, where, order, limit, offset).to_query_object()
        request.fast_search = indexed_only or None
        return table._analyze_plan(request) if analyze else table._explain_plan(request, verbose=True)
    return retrying(table, explain)


def first(table, name: str, where: str | None, order=()) -> dict | None:
    found = rows(table, name, where, order=order, limit=1)
    return found[0] if found else None
