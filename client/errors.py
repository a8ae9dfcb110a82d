"""What a call can fail with: the service's answer as an exception, or no answer.

Every error the service answers has one body, ``{"error": {"code", "message"}}``
(api/errors.py); :class:`ApiError` carries it whole (``body``) with its HTTP
status, and a subclass per status a caller may want to catch alone
(``except NotFound``).  :class:`Unreachable` is the other kind: the request
got no answer at all (refused, dropped, timed out), so a POST may or may not
have been applied; the client has already retried what it could (_http.py).
"""
from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Anything this package raises."""


class Unreachable(ClientError):
    """No answer: the service could not be reached, or did not answer in time."""

    def __init__(self, url: str, reason: str, timed_out: bool = False):
        super().__init__(reason)
        self.url, self.reason, self.timed_out = url, reason, timed_out


class WaitTimeout(ClientError, TimeoutError):
    """A wait (for an action, a status, an eval run) reached its deadline; ``last`` is what was seen last."""

    def __init__(self, message: str, last: Any = None):
        super().__init__(message)
        self.last = last


class ApiError(ClientError):
    """The service answered with an error: ``status``, and its body's ``code`` and ``message``."""

    def __init__(self, status: int, code: str, message: str, body: Any = None):
        super().__init__(f"{message} [{code}, HTTP {status}]")
        self.status, self.code, self.message, self.body = status, code, message, body


class BadRequest(ApiError):
    """400: the request is invalid (a field, an id, a filter)."""


class Unauthorized(ApiError):
    """401: no token, or not a token of this service."""


class Forbidden(ApiError):
    """403: the token's role may not do this (or the site is refused)."""


class NotFound(ApiError):
    """404: no such agent, session, action, tool call, eval set..."""


class Conflict(ApiError):
    """409: not now (pausing a session that has none, approving a call that no longer waits...)."""


class Unprocessable(ApiError):
    """422: an Idempotency-Key used before with another request."""


class RateLimited(ApiError):
    """429: too many requests; ``retry_after`` in seconds when the service said."""

    retry_after: float | None = None


class ServerError(ApiError):
    """5xx: the service failed (a bug, logged there) or is not ready (503)."""


BY_STATUS = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 422: Unprocessable,
             429: RateLimited}


def from_answer(status: int, body: Any, text: str = "", retry_after: str | None = None) -> ApiError:
    """The exception for an error answer; a body not in the service's shape
    (a proxy's page, say) becomes ``http_error`` with the start of its text."""
    try:
        code, message = body["error"]["code"], body["error"]["message"]
    except (KeyError, TypeError):
        code, message = "http_error", f"HTTP {status}: {text[:200]}"
    kind = ServerError if status >= 500 else BY_STATUS.get(status, ApiError)
    error = kind(status, code, message, body)
    if isinstance(error, RateLimited) and retry_after:
        try:
            error.retry_after = float(retry_after)
        except ValueError:
            pass
    return error
