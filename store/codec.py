"""Turning service dicts into table rows and back.

JSON columns are stored as text and decoded defensively: a value that is not
valid JSON comes back as the plain string rather than raising.  Timestamps come
back as ISO-8601 strings in UTC so every caller can hand rows to JSON as-is.
"""
import json
import re
from datetime import datetime, timezone

import orjson

from domain.redact import redact_json_text
from store.schemas import DERIVED_COLUMNS, HIDDEN_COLUMNS, JSON_COLUMNS


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# Sorted keys, compact, anything else through str(): what json.dumps(sort_keys=True,
# separators=(",", ":"), default=str) wrote before, at a tenth of its cost (this runs
# for every JSON column of every step row and snapshot).  Datetimes and dataclasses
# go through str() as they did; orjson writes non-ASCII as UTF-8 rather than \u
# escapes, and NaN or infinities as null (JSON has neither; JavaScript's
# JSON.parse refused what json wrote).  What orjson refuses (keys that are not
# strings, integers past 64 bits, lone surrogates) is written by json as before.
_ORJSON_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def dumps(value) -> str | None:
    if value is None:
        return None
    try:
        return orjson.dumps(value, default=str, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


_LONG_NUMBER = re.compile(r"\d{19}")  # may be past 64 bits, which orjson reads as a float


def loads(text):
    """The value of a JSON column; its text when it is not JSON.  Rows written by
    json.dumps may hold NaN, which orjson refuses, and text with a run of 19 or
    more digits may hold an integer orjson would read as a float: json reads those."""
    if text is None or text == "":
        return None
    if isinstance(text, str) and _LONG_NUMBER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
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


def parse_time(value):
    """The datetime of an ISO-8601 time as :func:`iso` writes it ("Z" for UTC);
    a datetime or None is returned as it is.  (Python 3.11's fromisoformat reads
    "Z" itself; the replace keeps the reading exact on any 3.x.)"""
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


def with_times(row: dict, keys) -> dict:
    """``row`` with its ``keys`` as datetimes: rows read back carry ISO-8601
    strings, and a row written again must carry timestamps."""
    for key in keys:
        if isinstance(row.get(key), str):
            row[key] = parse_time(row[key])
    return row


def encode(table: str, row: dict) -> dict:
    """A row as the table stores it: JSON columns as text, with the values of
    secret-named keys redacted (domain/redact.py: nothing secret reaches the disk)."""
    json_cols = JSON_COLUMNS.get(table, set())
    out = {k: (_json_text(v) if k in json_cols else v) for k, v in row.items()}
    for column, (derive, _sql, needs) in DERIVED_COLUMNS.get(table, {}).items():
        if all(out.get(name) is not None for name in needs):  # a whole row, not a partial update
            out[column] = derive(out)
    return out


def _json_text(value):
    if value is None:
        return None
    return redact_json_text(value if isinstance(value, str) else dumps(value))


def decode(table: str, row: dict) -> dict:
    json_cols = JSON_COLUMNS.get(table, set())
    hidden = HIDDEN_COLUMNS.get(table, ())
    out = {}
    for key, value in row.items():
        if key in hidden:
            continue
        if key in json_cols:
            value = loads(value)
        out[key] = iso(value) if isinstance(value, datetime) else value  # (inline: every column of every row read)
    return out
