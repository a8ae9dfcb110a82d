"""Full-text search over everything agents did: step texts, conversation
messages, session summaries and tool calls.

Each searchable table is one :class:`Source` in :data:`SOURCES`: which
columns hold text, which columns a hit shows, which filters apply.  A source
whose table does not exist (yet) is skipped, so a new table becomes searchable
by adding one entry here and one FTS index (created by
:func:`ensure_search_indexes`).

LanceDB's native FTS index (BM25, works offline) is built on every text column.
Rows appended after the index was built are *not* lost: LanceDB scans them
(a flat search over the unindexed rows; the test
``test_new_rows_are_found_before_and_after_the_index_refresh`` checks it) until
an ``optimize()`` folds them into the index, which is what
:func:`refresh_search_indexes` asks the maintainer to do once enough have piled
up.  So a row is searchable as soon as it is committed; refresh only keeps the
scan short.

The user's query never reaches LanceDB as syntax: it is reduced to plain word
terms (:func:`terms_of`) and run as a ``MatchQuery`` (OR of terms, BM25 ranked).
Filters are built by :mod:`store.filters` from checked ids and closed word sets.
"""
from domain.statuses import STEP_STATUSES, TOOL_CALL_STATUSES
import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from lancedb.index import FTS
from lancedb.query import MatchQuery, MultiMatchQuery

from store import codec, filters, query

log = logging.getLogger("store.search")

MAX_TERMS = 32
MAX_TERM_CHARS = 40  # the FTS tokenizer's own max_token_length
SNIPPET_CHARS = 200
SUMMARY_SNIPPET_CHARS = 600  # a summary is read whole more often than not
WORD = re.compile(r"\w+", re.UNICODE)
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="search")


@dataclass(frozen=True)
class Source:
    kind: str
    table: str
    id_column: str
    text_columns: tuple[str, ...]
    columns: tuple[str, ...]  # shown on a hit, besides the text columns
    statuses: frozenset[str] | None = None  # the closed set of its status column, None: no status

    @property
    def filterable(self) -> set[str]:
        return set(self.columns)

    @property
    def selected(self) -> list[str]:
        """The columns a hit reads (shown and text columns, each once)."""
        return list(dict.fromkeys([*self.columns, *self.text_columns]))


SOURCES: tuple[Source, ...] = (
    Source("step", "agent_steps", "id", ("text",),
           ("id", "created_at", "agent_id", "session_id", "iteration", "status", "step_token"), STEP_STATUSES),
    Source("message", "conversation_messages", "message_id", ("text",),
           ("message_id", "created_at", "conversation_id", "agent_id", "session_id", "iteration", "sender_type",
            "user_id")),
    Source("summary", "summaries", "id", ("text",),
           ("id", "created_at", "kind", "agent_id", "session_id", "conversation_id", "method", "last_iteration")),
    # A tool call is found by its name, arguments, result or error.
    Source("tool_call", "tool_calls", "id", ("name", "args", "result", "error"),
           ("id", "created_at", "agent_id", "session_id", "iteration", "status", "name"), TOOL_CALL_STATUSES),
)
KINDS = frozenset(s.kind for s in SOURCES)
STATUSES = frozenset().union(*(s.statuses or () for s in SOURCES))


def terms_of(text: str) -> list[str]:
    """The words of a user's query, lower-cased, de-duplicated, capped: no
    operators, quotes, field names or wildcards survive."""
    out: list[str] = []
    for word in WORD.findall(text.lower()):
        word = word[:MAX_TERM_CHARS]
        if word not in out:
            out.append(word)
        if len(out) == MAX_TERMS:
            break
    return out


@dataclass
class SearchQuery:
    terms: list[str]
    kinds: frozenset[str] = KINDS
    agent_id: str | None = None
    session_id: str | None = None
    conversation_id: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    session_ids: list[str] | None = None  # e.g. the sessions of one moniker; [] matches nothing
    limit: int = 20


# ---- indexes ---------------------------------------------------------------

def present_sources(tables: dict) -> list[Source]:
    return [s for s in SOURCES if s.table in tables]


def ensure_search_indexes(tables: dict) -> None:
    """An FTS index on every text column of every source table that lacks one."""
    for source in present_sources(tables):
        table = tables[source.table]
        have = {tuple(ix.columns) for ix in table.list_indices()}
        for column in source.text_columns:
            if (column,) in have:
                continue
            try:
                table.create_index(column, config=FTS(with_position=False))
                log.info("created FTS index on %s.%s", source.table, column)
            except Exception as exc:  # another process created it first, most likely
                log.debug("FTS index %s.%s: %s", source.table, column, exc)


def unindexed_rows(tables: dict) -> dict[str, int]:
    """Rows per source table that the FTS index does not cover yet (scanned at query time)."""
    out = {}
    for source in present_sources(tables):
        try:
            stats = tables[source.table].index_stats(f"{source.text_columns[0]}_idx")
        except Exception as exc:
            log.debug("index stats of %s: %s", source.table, exc)
            continue
        if stats is not None:
            out[source.table] = stats.num_unindexed_rows
    return out


def refresh_search_indexes(store, optimize, min_unindexed: int = 20_000) -> list[str]:
    """Fold new rows into the FTS indexes of tables where at least
    ``min_unindexed`` rows are still scanned, by calling ``optimize(table_name)``
    (the maintainer's, which compacts, updates every index and cleans up, with
    its retries).  Returns the tables it refreshed.  New rows are searchable
    before this runs, only slower."""
    refreshed = []
    for name, pending in unindexed_rows(store.tables).items():
        if pending >= min_unindexed:
            optimize(name)
            refreshed.append(name)
    return refreshed


class SearchIndexWatch:
    """What the background maintenance asks each round: which tables need an
    optimize for their FTS indexes' sake (many rows scanned at query time),
    besides those due by version count.  Looks at most every ``every_s``."""

    def __init__(self, min_unindexed: int = 20_000, every_s: float = 30.0):
        self.min_unindexed = min_unindexed
        self.every_s = every_s
        self._last = float("-inf")

    def due(self, tables: dict) -> list[str]:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return []
        self._last = now
        return [name for name, pending in unindexed_rows(tables).items() if pending >= self.min_unindexed]


# ---- queries ---------------------------------------------------------------

def _where(source: Source, q: SearchQuery) -> str | None | bool:
    """The filter of one source, or False when a filter rules the whole source out."""
    cols = source.filterable
    wanted = {"agent_id": q.agent_id, "session_id": q.session_id, "conversation_id": q.conversation_id}
    clauses = []
    for column, value in wanted.items():
        if value is None:
            continue
        if column not in cols:
            return False
        clauses.append(filters.eq_id(column, value))
    if q.session_ids is not None:
        if not q.session_ids or "session_id" not in cols:
            return False
        clauses.append(filters.in_ids("session_id", q.session_ids))
    if q.status is not None:
        if source.statuses is None or q.status not in source.statuses:
            return False
        clauses.append(filters.eq_word("status", q.status, source.statuses))
    if q.since is not None:
        clauses.append(filters.ts_cmp("created_at", ">=", q.since))
    if q.until is not None:
        clauses.append(filters.ts_cmp("created_at", "<", q.until))
    return filters.all_of(*clauses)


def fts(tables: dict, q: SearchQuery, failed: list[str] | None = None) -> list[dict]:
    """The best ``q.limit`` hits over all sources, by BM25 score.  A source
    whose read fails is logged and left out (its kind appended to ``failed``):
    one broken table does not take search down."""
    if not q.terms:
        return []
    text = " ".join(q.terms)
    wanted = [(source, where) for source in present_sources(tables)
              if source.kind in q.kinds and (where := _where(source, q)) is not False]
    # The tables are searched at once (LanceDB releases the GIL): a search takes
    # as long as its slowest table, not the sum of them.
    def read(source_where):
        source, where = source_where
        try:
            return source, _fts_rows(tables[source.table], source, text, where, q.limit)
        except Exception:
            log.exception("full-text search of %s failed; answering without it", source.table)
            if failed is not None:
                failed.append(source.kind)
            return source, []
    hits = [hit_of(source, row, q.terms) for source, rows in _POOL.map(read, wanted) for row in rows]
    hits.sort(key=lambda h: (-h["score"], h["created_at"] or ""))
    return hits[:q.limit]


def _fts_rows(table, source: Source, text: str, where: str | None, limit: int) -> list[dict]:
    match = (MatchQuery(text, source.text_columns[0]) if len(source.text_columns) == 1
             else MultiMatchQuery(text, list(source.text_columns)))

    def read():
        search = table.search(match, query_type="fts")
        if where:
            search = search.where(where, prefilter=True)
        return search.select([*source.selected, "_score"]).limit(limit).to_list()
    return [codec.decode(source.table, r) for r in query.retrying(table, read)]


def rows_by_id(tables: dict, kind: str, ids: list[str]) -> list[dict]:
    """Source rows of one kind by id (for hits found by the vector search)."""
    source = next(s for s in SOURCES if s.kind == kind)
    if source.table not in tables or not ids:
        return []
    return query.rows(tables[source.table], source.table, filters.in_ids(source.id_column, ids),
                      columns=source.selected, limit=len(ids))


def source_of(kind: str) -> Source:
    return next(s for s in SOURCES if s.kind == kind)


def hit_of(source: Source, row: dict, terms: list[str], score: float | None = None) -> dict:
    """What a search result says: kind, ids, time, score and a snippet with the
    matched words' positions (the client highlights them; no markup is sent)."""
    text, column = _best_text(source, row, terms)
    snippet, highlights = snippet_of(text, terms, SUMMARY_SNIPPET_CHARS if source.kind == "summary" else SNIPPET_CHARS)
    hit = {"kind": source.kind, "id": row.get(source.id_column), "created_at": row.get("created_at"),
           "score": round(float(score if score is not None else row.get("_score") or 0.0), 6),
           "agent_id": row.get("agent_id"), "session_id": row.get("session_id"),
           "conversation_id": row.get("conversation_id"), "iteration": row.get("iteration"),
           "status": row.get("status") if source.statuses else None,
           "field": column, "snippet": snippet, "highlights": highlights}
    if source.kind == "summary":
        hit.update(summary_kind=row.get("kind"), method=row.get("method"), iteration=row.get("last_iteration"))
    elif source.kind == "message":
        hit.update(sender_type=row.get("sender_type"), user_id=row.get("user_id"))
    elif source.kind == "tool_call":
        hit.update(name=row.get("name"))
    return hit


def _best_text(source: Source, row: dict, terms: list[str]) -> tuple[str, str]:
    """The first text column that contains a query word (else the first non-empty one)."""
    texts = [(_as_text(row.get(c)), c) for c in source.text_columns]
    for text, column in texts:
        if text and _first_match(text, terms) is not None:
            return text, column
    return next(((t, c) for t, c in texts if t), ("", source.text_columns[0]))


def _as_text(value) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else codec.dumps(value)


def _first_match(text: str, terms: list[str]) -> re.Match | None:
    if not terms:
        return None
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(t) for t in terms) + r")\w*", re.IGNORECASE)
    return pattern.search(text)


def snippet_of(text: str, terms: list[str], width: int = SNIPPET_CHARS) -> tuple[str, list[list[int]]]:
    """A window of ``text`` around its first match, and [start, end) offsets of
    every word in it that starts with a query term (stems match: "jokes" for "joke")."""
    if not text:
        return "", []
    first = _first_match(text, terms)
    start = max(0, (first.start() if first else 0) - width // 3)
    end = min(len(text), start + width)
    snippet = ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")
    offset = 1 if start else 0
    highlights = []
    if terms:
        pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(t) for t in terms) + r")\w*", re.IGNORECASE)
        highlights = [[m.start() + offset, m.end() + offset] for m in pattern.finditer(text[start:end])]
    return snippet, highlights


def rows_since(tables: dict, source: Source, since: datetime | None, limit: int) -> list[dict]:
    """Rows of a source created at or after ``since``, oldest first (the embedder's feed)."""
    where = filters.ts_cmp("created_at", ">=", since) if since is not None else None
    return query.rows(tables[source.table], source.table, where, order=[("created_at", True)],
                      columns=source.selected, limit=limit)


def text_for_embedding(source: Source, row: dict) -> str:
    """What a row says, as one text: its text columns joined."""
    return "\n".join(t for t in (_as_text(row.get(c)) for c in source.text_columns) if t)


def vector_where(q: SearchQuery) -> str | None | bool:
    """The filter of a search on the vectors table (store/vectors.py), which
    copies each source row's filter columns; False when nothing can match."""
    kinds = sorted(q.kinds & KINDS)
    if not kinds or q.session_ids == []:
        return False
    if q.status is not None and q.status not in STATUSES:
        return False
    return filters.all_of(
        filters.in_words("kind", kinds, KINDS) if len(kinds) < len(KINDS) else None,
        filters.eq_id("agent_id", q.agent_id) if q.agent_id else None,
        filters.eq_id("session_id", q.session_id) if q.session_id else None,
        filters.in_ids("session_id", q.session_ids) if q.session_ids else None,
        filters.eq_id("conversation_id", q.conversation_id) if q.conversation_id else None,
        filters.eq_word("status", q.status, STATUSES) if q.status else None,
        filters.ts_cmp("created_at", ">=", q.since) if q.since is not None else None,
        filters.ts_cmp("created_at", "<", q.until) if q.until is not None else None,
    )
