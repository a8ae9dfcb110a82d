"""The only place where LanceDB filter strings are built.

Ids that come from users are checked against a strict pattern before they get
near a filter, and every literal is quoted with its quotes doubled, so no input
can change the meaning of a filter.  Column names are always constants of this
package, never input.
"""
import re
from datetime import datetime, timezone

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


class InvalidId(ValueError):
    """An id that does not match :data:`ID_PATTERN`."""


def check_id(value: object, what: str = "id") -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvalidId(f"{what} must match {ID_PATTERN.pattern}")
    return value


def quote(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def eq_id(column: str, value: str) -> str:
    return f"{column} = {quote(check_id(value, column))}"


def in_ids(column: str, values) -> str:
    quoted = ", ".join(quote(check_id(v, column)) for v in values)
    return f"{column} IN ({quoted})"


def eq_word(column: str, value: str, allowed) -> str:
    """Equality against one of a closed set of words (statuses, types)."""
    if value not in allowed:
        raise ValueError(f"{column} must be one of {sorted(allowed)}")
    return f"{column} = {quote(value)}"


def in_words(column: str, values, allowed) -> str:
    for value in values:
        if value not in allowed:
            raise ValueError(f"{column} must be one of {sorted(allowed)}")
    return f"{column} IN ({', '.join(quote(v) for v in values)})"


def int_cmp(column: str, op: str, value: int) -> str:
    if op not in ("=", "<", "<=", ">", ">="):
        raise ValueError(f"bad operator {op!r}")
    return f"{column} {op} {int(value)}"


def ts_cmp(column: str, op: str, when: datetime) -> str:
    if op not in ("<", "<=", ">", ">="):
        raise ValueError(f"bad operator {op!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    when = when.astimezone(timezone.utc)
    text = f"{when.year:04d}" + when.strftime("-%m-%dT%H:%M:%S.%f")  # %Y is not zero-padded below 1000
    return f"{column} {op} CAST({quote(text)} AS TIMESTAMP)"


def between(column: str, lo: str, hi: str) -> str:
    """``lo <= column <= hi`` for keys this package built from checked ids."""
    return f"{column} >= {quote(lo)} AND {column} <= {quote(hi)}"


def all_of(*clauses) -> str | None:
    parts = [c for c in clauses if c]
    return " AND ".join(f"({p})" for p in parts) if parts else None


def id_cmp(column: str, op: str, value: str) -> str:
    """Order comparison against a checked id (ULIDs sort by time), for cursors."""
    if op not in ("<", "<=", ">", ">="):
        raise ValueError(f"bad operator {op!r}")
    return f"{column} {op} {quote(check_id(value, column))}"


def any_of(*clauses) -> str | None:
    parts = [c for c in clauses if c]
    return " OR ".join(f"({p})" for p in parts) if parts else None


def negate(clause: str) -> str:
    """NOT of a clause built by this module (never of raw input)."""
    return f"NOT ({clause})"


def is_set(column: str, *empty: str) -> str:
    """The column is not null, nor any of the constant texts ``empty`` (a JSON
    column's empty list, say): callers pass constants, never input."""
    parts = [f"{column} IS NOT NULL", *(f"{column} <> {quote(e)}" for e in empty)]
    return " AND ".join(parts)


def has_json_word(column: str, word: str, allowed) -> str:
    """A JSON text column holds ``word`` (one of a closed set, with no LIKE
    wildcard in it) as a whole JSON string somewhere: candidates, to be checked
    on the decoded value."""
    if word not in allowed or "%" in word or "_" in word:
        raise ValueError(f"{column} word must be one of {sorted(allowed)}")
    return f"{column} LIKE {quote('%' + chr(34) + word + chr(34) + '%')}"
