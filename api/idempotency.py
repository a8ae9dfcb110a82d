"""``Idempotency-Key``: a POST that queues actions can be retried without
queueing them twice, as with Stripe's API.

A client that did not get the answer to a POST (the connection dropped, app.py
was killed mid-request) cannot know whether its request was queued.  With an
``Idempotency-Key: <any 1-255 printable characters>`` header it sends the same
request again with the same key: within a day, the service answers what it
answered the first time (with ``Idempotent-Replayed: true``) and queues
nothing new.  The same key with another request (another route or body) is a
422; keys are per token, so two clients' keys never meet.

Where the first answer is kept: on the action rows the request queued, in the
same commit (``store/actions.py`` ``idempotency_key``, ``request_hash``, and
the first row's ``answer``).  So either the actions and the key are durable
together, or neither is and the retry is a first try.  A request that queued
nothing (a 4xx, a create naming a session that exists, a bulk call that
matched nothing) keeps no key: its retry is judged afresh, which changes
nothing either.  One process serialises requests with the same key; two
app.py instances taking the same key at the same instant can both queue
(documented in docs/security.md).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from datetime import timedelta
from functools import wraps

from flask import g, jsonify, request

from api import auth
from api.context import ctx
from api.errors import ApiError
from api.requests import parse_json
from store import codec

HEADER = "Idempotency-Key"
WINDOW = timedelta(days=1)
KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")
_LOCKS = [threading.Lock() for _ in range(64)]


def idempotent(view):
    """Under a route that queues actions: honour ``Idempotency-Key``."""
    @wraps(view)
    def wrapper(*args, **kwargs):
        key = request.headers.get(HEADER)
        g.idempotency = None
        if key is None:
            return view(*args, **kwargs)
        if not KEY_PATTERN.match(key):
            raise ApiError(400, "invalid_idempotency_key", f"{HEADER} must be 1 to 255 printable ASCII characters")
        key_hash = _hash(auth.actor() or "", key)
        request_hash = _hash(request.method, request.path, _canonical_body())
        with _LOCKS[int(key_hash[:2], 16) % len(_LOCKS)]:
            earlier = ctx().store.actions.by_idempotency_key(key_hash, codec.utcnow() - WINDOW)
            if earlier:
                return _first_answer(earlier, request_hash)
            g.idempotency = (key_hash, request_hash)
            return view(*args, **kwargs)
    return wrapper


def stamp(rows: list[dict], body: dict, status: int) -> None:
    """Mark the rows a request is about to queue with its key, and the first
    with its answer (a no-op without a key)."""
    pending = g.get("idempotency")
    if not pending or not rows:
        return
    key_hash, request_hash = pending
    for row in rows:
        row["idempotency_key"], row["request_hash"] = key_hash, request_hash
    rows[0]["answer"] = {"status": status, "body": body}


def key_hash() -> str | None:
    """The current request's key hash, if it has a key (api/routes/conversations.py names its message by it)."""
    pending = g.get("idempotency")
    return pending[0] if pending else None


def _first_answer(rows: list[dict], request_hash: str):
    if rows[0].get("request_hash") != request_hash:
        raise ApiError(422, "idempotency_key_reused", f"this {HEADER} was used with another request in the "
                                                      "last day; use a new key for a new request")
    answer = next((r["answer"] for r in rows if isinstance(r.get("answer"), dict)), None)
    if answer is None:  # rows queued without their answer cannot happen (one commit); say so plainly if it does
        raise ApiError(409, "conflict", f"the request with this {HEADER} was queued, but its answer is not kept")
    response = jsonify(answer["body"])
    response.headers["Idempotent-Replayed"] = "true"
    return response, answer["status"]


def _canonical_body() -> str:
    raw = request.get_data()
    return json.dumps(parse_json(raw), sort_keys=True, separators=(",", ":")) if raw else ""


def _hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
