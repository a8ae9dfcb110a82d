"""The W3C trace context an HTTP request carried, kept with the actions it queued.

app.py does not trace requests itself; a caller that does sends the standard
``traceparent`` header (https://www.w3.org/TR/trace-context/#traceparent-header).
api/sessions.py keeps the header, once checked here, in each queued action's
payload under :data:`PAYLOAD_KEY` (the payload, not a new column: no table
migration, and processes of the previous version simply ignore the key);
runtime/dispatch/actions.py takes it out again before a handler sees the
payload, and runtime/record/tracing.py links the span of the step that the
action caused to the request's span.

The header is user input: only the exact version-00 form is accepted (55
characters, lower-case hex, neither id all zeros); anything else is ignored,
as the specification asks of a receiver that cannot parse it.
"""
from __future__ import annotations

import re

PAYLOAD_KEY = "traceparent"
HEADER = "traceparent"
_FORM = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")


def parse(value) -> tuple[int, int, int] | None:
    """(trace id, span id, flags) of a valid version-00 ``traceparent``, else None."""
    if not isinstance(value, str) or len(value) != 55:
        return None
    found = _FORM.fullmatch(value)
    if found is None:
        return None
    trace, span, flags = (int(part, 16) for part in found.groups())
    return (trace, span, flags) if trace and span else None


def checked(value) -> str | None:
    """``value`` when it is a valid ``traceparent`` (surrounding blanks removed), else None."""
    value = value.strip() if isinstance(value, str) else None
    return value if parse(value) else None


def without(payload: dict) -> dict:
    """The payload as its handler reads it: without the kept trace context."""
    if PAYLOAD_KEY not in payload:
        return payload
    return {k: v for k, v in payload.items() if k != PAYLOAD_KEY}
