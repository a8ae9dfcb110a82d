"""Keeping secrets out of the record: values under keys named like secrets
are replaced with ``[redacted]`` before anything is written to a table, sent
as an event, answered over HTTP or logged.

This is the second line of defence.  The first is that no route accepts a
secret in a config at all (model endpoints and their keys are the operator's:
monikers/llm_settings.py); but a plugin moniker's config, a tool's arguments,
an agent's state or a tool's result may still carry one, and none of those
should reach the disk, a browser or a log in the clear.

Which keys: ``api_key`` (and ``x-api-key``, ``openai_api_key``, ``apikey``),
``token`` and ``access/refresh/auth/id/bearer/session/api_token``, ``secret``
(``client_secret``, ``secret_key``), ``password``/``passwd`` (``db_password``),
``private_key``, ``authorization`` (``proxy-authorization``) and ``cookie``
(``set-cookie``): case-insensitive, ``-`` or ``_``, at any depth.  Not
``step_token`` or ``max_tokens``: the service's own words that merely end like
one are left alone.

The check runs on every write, so it is made cheap: a value is serialised (as
it is about to be anyway) and searched for the words such keys end with; only
a match walks it, and only a secret-named key makes a copy.
"""
from __future__ import annotations

import re

import orjson

REDACTED = "[redacted]"
_SEP = r"[-_]"
SECRET_KEY = (rf"(?:[a-z0-9]+{_SEP})*(?:api{_SEP}?key|secret|secret{_SEP}key|password|passwd|private{_SEP}key)"
              rf"|(?:proxy{_SEP})?authorization|(?:set{_SEP})?cookie"
              rf"|(?:(?:access|refresh|auth|id|bearer|session|api){_SEP})?token")
_KEY = re.compile(rf"^(?:{SECRET_KEY})$", re.IGNORECASE)
# Every secret-named key ends with one of these words; a serialised value
# whose text has none of them followed by a quote has no such key.  Substring
# tests run at memchr speed (~1 us for a snapshot's config), where one
# case-insensitive regular expression took ~450 us.
_ENDINGS = tuple(f'{word}"' for word in ("key", "token", "secret", "password", "passwd", "authorization", "cookie"))
# In free text (log lines, error messages): a bearer credential, and key=value / "key": "value" pairs.
_IN_TEXT = [
    (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    (re.compile(rf'(?i)("(?:{SECRET_KEY})"\s*:\s*)"(?:[^"\\]|\\.)*"'), r'\1"' + REDACTED + '"'),
    (re.compile(rf"(?i)('(?:{SECRET_KEY})'\s*:\s*)'[^']*'"), r"\1'" + REDACTED + "'"),
    (re.compile(rf"(?i)\b((?:{SECRET_KEY})=)[^\s&,;]+"), r"\1" + REDACTED),
]


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and _KEY.match(key) is not None


def json_has_secret(text: str) -> bool:
    """Whether serialised JSON may have a key named like a secret (the cheap
    test: it may say yes for ``step_token``, never no for ``api_key``)."""
    low = text.lower()
    return any(ending in low for ending in _ENDINGS)


def redact(value):
    """``value`` with every secret-named key's value replaced; the same object
    when there is none (so the common case copies nothing)."""
    try:
        text = orjson.dumps(value, default=str, option=orjson.OPT_PASSTHROUGH_DATETIME).decode()
    except (TypeError, orjson.JSONEncodeError):
        return _walk(value)
    return _walk(value) if json_has_secret(text) else value


def redact_json_text(text: str) -> str:
    """Serialised JSON with secret-named keys' values replaced (for a row's JSON column)."""
    if not json_has_secret(text):
        return text
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return redact_text(text)
    cleaned = _walk(parsed)
    return text if cleaned is parsed else orjson.dumps(cleaned, option=orjson.OPT_SORT_KEYS).decode()


def redact_text(text: str) -> str:
    """Free text (a log line, an error message) with credentials in it replaced."""
    for pattern, replacement in _IN_TEXT:
        text = pattern.sub(replacement, text)
    return text


def _walk(value):
    """``value`` with secret-named keys' values replaced; the same object when none changed."""
    if isinstance(value, dict):
        out = {k: (REDACTED if is_secret_key(k) and v is not None else _walk(v)) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, (list, tuple)):
        out = [_walk(v) for v in value]
        return value if all(a is b for a, b in zip(out, value)) else out
    return value
