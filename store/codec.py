"""Turning service dicts into table rows and back.

JSON columns are stored as text and decoded defensively: a value that is not
valid JSON comes back as the plain string rather than raising.  Timestamps come
back as ISO-8601 strings in UTC so every caller can hand rows to JSON as-is.
"""
import json
from datetime import datetime, timezone

from store.schemas import DERIVED_COLUMNS, HIDDEN_COLUMNS, JSON_COLUMNS


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def dumps(value) -> str | None:
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def loads(text):
    if text is None or text == "":
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def iso(value):
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return value


def encode(table: str, row: dict) -> dict:
    json_cols = JSON_COLUMNS.get(table, set())
    out = {k: (dumps(v) if k in json_cols and not isinstance(v, str) else v) for k, v in row.items()}
    for column, (derive, _sql, needs) in DERIVED_COLUMNS.get(table, {}).items():
        if all(out.get(name) is not None for name in needs):  # a whole row, not a partial update
            out[column] = derive(out)
    return out


def decode(table: str, row: dict) -> dict:
    json_cols = JSON_COLUMNS.get(table, set())
    hidden = HIDDEN_COLUMNS.get(table, ())
    out = {}
    for key, value in row.items():
        if key in hidden:
            continue
        if key in json_cols:
            value = loads(value)
        out[key] = iso(value)
    return out
