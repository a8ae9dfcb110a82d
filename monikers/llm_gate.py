"""The gate every model call of the service passes through, one HTTP request at a time.

A moniker (or the archive, or a turn summary) that calls a model asks the gate
for a *permit* before each HTTP request, and hands it back when the request
ended, with its tokens and its HTTP status and ``Retry-After``:

    permit = await gate().acquire(model, estimated_tokens)   # waits its turn
    ... send one request ...
    gate().release(permit, tokens=used, status=200)          # or status=429, retry_after=2.0

The default gate lets everything through at once.  agents.py installs the
shared rate limiter (runtime/base/rate_limits.py: requests and tokens per minute per
model, across every worker on one database) with :func:`install`.  Monikers
know nothing of where the limits are kept: this module is their whole contract
with it.  :func:`baml_call` in monikers/baml_moniker.py is the one place the
BAML functions are called through it.
"""
import asyncio
import time
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field


class ModelLimit(BaseModel):
    """One model's shared rate limit (the rate limits file, or an endpoint's
    ``rate_limits`` in the endpoints file: monikers/endpoints.py)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    requests_per_minute: int | None = Field(None, ge=1, le=10_000_000)
    tokens_per_minute: int | None = Field(None, ge=1, le=10_000_000_000)


@dataclass
class Permit:
    """One admitted request: which model, when it was let through, how long it waited."""

    model: str
    tokens: int
    waited_s: float = 0.0
    admitted_at: float = field(default_factory=time.monotonic)
    entry: object = None  # the limiter's own bookkeeping


class OpenGate:
    """No limits: every request goes at once; a 429's Retry-After still holds the
    model back in this process (that much is always honoured)."""

    def __init__(self):
        self._blocked_until: dict[str, float] = {}

    async def acquire(self, model: str, tokens: int) -> Permit:
        waited = 0.0
        while (wait := self._blocked_until.get(model, 0.0) - time.monotonic()) > 0:
            started = time.monotonic()
            await asyncio.sleep(wait)
            waited += time.monotonic() - started
        return Permit(model, tokens, waited_s=waited)

    def release(self, permit: Permit, *, tokens: int | None = None, status: int | None = None,
                retry_after: float | None = None) -> None:
        if status == 429 and retry_after:
            until = time.monotonic() + retry_after
            self._blocked_until[permit.model] = max(self._blocked_until.get(permit.model, 0.0), until)


_gate = OpenGate()


def account(model: str | None, tokens: int) -> None:
    """A model call made without a permit (a plugin moniker that only reports its
    usage with ``StepContext.record_usage``): counted against the model's limit
    after the fact, so the calls that follow wait for it."""
    if model and hasattr(_gate, "account"):
        _gate.account(model, tokens)


def install(new_gate) -> None:
    """Route every model call of this process through ``new_gate`` (agents.py, at start)."""
    global _gate
    _gate = new_gate


def gate():
    return _gate


def estimate_tokens(*texts, reply_tokens: int | None = None) -> int:
    """A request's tokens before it is sent: ~4 characters a token for the prompt's
    parts, a few hundred for the template, and the reply's cap (a guess of 500
    when None; 0 for the prompt alone)."""
    prompt = sum(len(t) for t in texts if isinstance(t, str)) // 4 + 300
    return prompt + (500 if reply_tokens is None else reply_tokens)


def retry_after_s(headers: dict | None, default: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (seconds, or an HTTP date), capped at an hour."""
    value = (headers or {}).get("retry-after") or (headers or {}).get("Retry-After")
    if value is None:
        return default
    try:
        return min(max(float(value), 0.0), 3600.0)
    except ValueError:
        from email.utils import parsedate_to_datetime
        try:
            return min(max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0), 3600.0)
        except (TypeError, ValueError):
            return default
