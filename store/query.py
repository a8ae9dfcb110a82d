"""Small helpers for reading rows out of a table."""
from lancedb.query import ColumnOrdering

from store import codec


def rows(table, name: str, where: str | None, order=(), limit: int | None = None,
         offset: int = 0, columns=None) -> list[dict]:
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
    q = q.limit(limit if limit is not None else max(table.count_rows(where) if where else table.count_rows(), 1))
    return [codec.decode(name, r) for r in q.to_list()]


def first(table, name: str, where: str | None, order=()) -> dict | None:
    found = rows(table, name, where, order=order, limit=1)
    return found[0] if found else None
