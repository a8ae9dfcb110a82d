"""What the sync and async clients share: the calls as data, the retry rule,
and reading an answer.

A :class:`Call` is one logical request: method, path, query, body, the model
of its answer, and whether it may be sent again.  The two clients differ only
in how they send it and how they sleep between tries, so each resource method
builds its call once here (sync.py and aio.py are thin).

Retrying.  A GET is sent again after no answer or a 5xx/429: reading twice
changes nothing.  A POST that queues actions carries an ``Idempotency-Key``
(api/idempotency.py), fresh per logical call and the same on every try of
it, so a try whose answer was lost (the connection dropped, app.py was killed
mid-request) is answered from the first one and queues nothing twice.  A POST
without a key (creating an eval set, starting a run) is sent once.
"""
from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from client import errors

DEFAULT_URL = "http://127.0.0.1:8765"
RETRIES = 3  # tries after the first, for a call that may be sent again
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 4.0


def default_url() -> str:
    """AGENTSVC_URL, else the local service (on AGENTSVC_PORT when set)."""
    port = os.environ.get("AGENTSVC_PORT")
    return os.environ.get("AGENTSVC_URL") or (f"http://127.0.0.1:{port}" if port else DEFAULT_URL)


def seg(some_id: str) -> str:
    """An id as one path segment: whatever was typed cannot reach another route."""
    return quote(str(some_id), safe="")


def params(**values) -> dict:
    """Query parameters without the ones not given."""
    return {k: v for k, v in values.items() if v is not None}


@dataclass
class Call:
    method: str
    path: str
    query: dict = field(default_factory=dict)
    body: dict | None = None
    model: type[BaseModel] | None = None  # None: the answer's JSON as it is
    idempotent: bool = False  # a POST that takes an Idempotency-Key
    ok: tuple[int, ...] = (200, 201, 202)
    key: str | None = None  # the Idempotency-Key of every try, drawn once per call

    def __post_init__(self):
        if self.idempotent and self.key is None:
            self.key = str(uuid.uuid4())

    @property
    def retryable(self) -> bool:
        return self.method == "GET" or self.idempotent

    def headers(self) -> dict:
        return {"Idempotency-Key": self.key} if self.key else {}

    def kwargs(self) -> dict:
        out: dict[str, Any] = {"params": self.query, "headers": self.headers()}
        if self.method != "GET":
            out["json"] = self.body if self.body is not None else {}
        return out


def answer(call: Call, response: httpx.Response):
    """The call's answer, as its model; the error answer as an exception."""
    if response.status_code in call.ok:
        data = response.json()
        return call.model.model_validate(data) if call.model else data
    raise error_of(response)


def error_of(response: httpx.Response) -> errors.ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    return errors.from_answer(response.status_code, body, response.text if body is None else "",
                              response.headers.get("Retry-After"))


def unreachable(url: str, exc: httpx.TransportError, timeout_s: float) -> errors.Unreachable:
    if isinstance(exc, httpx.TimeoutException):
        return errors.Unreachable(url, f"{url} did not answer in {timeout_s}s", timed_out=True)
    return errors.Unreachable(url, f"cannot reach {url}: {exc.__class__.__name__}")


def should_retry(call: Call, failure: errors.ClientError, attempt: int, retries: int) -> bool:
    if not call.retryable or attempt >= retries:
        return False
    return isinstance(failure, errors.Unreachable) or (
        isinstance(failure, errors.ApiError) and failure.status in RETRY_STATUSES)


def backoff(attempt: int, failure: errors.ClientError) -> float:
    """0.5 s, 1 s, 2 s... (capped, with jitter so many clients do not come back at once);
    a 429's Retry-After when it gave one."""
    if isinstance(failure, errors.RateLimited) and failure.retry_after is not None:
        return min(failure.retry_after, 30.0)
    return min(MAX_BACKOFF_S, 0.5 * 2 ** attempt) * random.uniform(0.8, 1.2)


def headers(token: str | None) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass
class Pager:
    """A listing read page by page (``limit``/``offset``), yielded item by item.

    ``page(limit, offset)`` makes the call of one page, whose answer holds the
    rows under ``key``.  It stops at a short page, or after ``max_items``.  A
    list ordered newest first shifts while it is read (a new row pushes the
    others down a place): a row already yielded (by ``ident``) is not yielded
    again."""
    page: Any  # (limit, offset) -> Call
    key: str
    item: type[BaseModel]
    ident: str
    page_size: int = 100
    offset: int = 0
    max_items: int | None = None

    def call(self, offset: int) -> Call:
        call = self.page(self.page_size, offset)
        call.model = None
        return call

    def rows(self, answer: dict, seen: set) -> tuple[list[BaseModel], int]:
        """The new items of a page, and how many rows it had."""
        rows = answer[self.key]
        out = []
        for row in rows:
            key = row.get(self.ident)
            if key in seen:
                continue
            seen.add(key)
            out.append(self.item.model_validate(row))
        return out, len(rows)
