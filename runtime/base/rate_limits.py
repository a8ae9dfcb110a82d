"""Shared model rate limits: requests and tokens per minute per model, held
across every session and every agents.py worker on one database.

The operator names the limits (``agents.py --rate-limits FILE`` or
``--rate-limit MODEL=RPM[:TPM]``); a model is the ``model`` of a session's LLM
settings, matched exactly.  Every model call passes the gate
(monikers/llm_gate.py) once per HTTP request; this module is the gate.

**What is guaranteed.**  A request *occupies* its model's budget from the
moment it is let through until one window (``window_s``, 60 s) after it
ended.  A worker lets a request through only while its occupied requests (and
tokens) stay within its *share*, and the shares of all workers together never
exceed the limit.  So in any window of ``window_s`` the provider receives at
most the limit, however long the requests take and however late they arrive
(the last of them to be let through saw all the others still occupying).
Tokens are counted with an estimate when the request goes and its real
tokens once it ends, so the token limit holds up to the estimate's error.

**Shares, through LanceDB.**  The shares live in the ``rate_ledger`` table,
one row per model, changed only by compare-and-swap on a version
(store/rate_ledger.py).  A worker's share is a *lease*: it renews it every
``lease_s / 2`` while it holds one, and a dead worker's share counts until
its lease ran out plus one window (its requests ended when it died).  A worker
that needs more than its share says so (``want``) and takes what is free;
workers that hold more than a fair split while others want give back down to
what they still occupy.  Writes happen when a share changes, a lease is
renewed, or a 429 arrives: never per request.  Reads (one small row) happen
every ``poll_s`` while a worker holds or wants a share.

**429s.**  A 429 holds the model back until its ``Retry-After`` (in every
worker, through the ledger) and multiplies the model's slow-down factor by
1.5 (at most 3): the limit in force is the
configured one divided by it.  The factor recovers by itself, halving its
excess every window.  Models without a configured limit honour Retry-After in
their worker only; other models are never affected.

Waiting calls wait (no error): their wait is on the step's usage
(``rate_wait_ms``) and in the metrics.
"""
import asyncio
import json
import logging
import math
import time
import tomllib
from collections import deque
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from monikers.llm_gate import ModelLimit, OpenGate, Permit

if TYPE_CHECKING:
    from store.rate_ledger import RateLedger

log = logging.getLogger("runtime.rate_limits")

MAX_THROTTLE = 3.0
THROTTLE_STEP = 1.5


class RateLimitConfig(BaseModel):
    """``{"window_s": 60, "models": {"gpt-4o": {"requests_per_minute": 500, "tokens_per_minute": 200000}}}``.
    ``window_s`` is the window the per-minute limits apply to: leave it at 60
    (tests shorten it, so that "6 per minute" becomes "6 per 5 s")."""

    model_config = ConfigDict(extra="forbid")

    window_s: float = Field(60.0, gt=0, le=3600)
    lease_s: float | None = Field(None, gt=0, le=3600, description="a worker's share lasts this long unless renewed "
                                                                   "(default: half a window, at least 5 s)")
    models: dict[str, ModelLimit] = Field(default_factory=dict)


def load_config(path: str | None, flags=(), endpoint_limits: dict[str, ModelLimit] | None = None) -> RateLimitConfig:
    """The endpoints file's limits (monikers/endpoints.py), the rate limits file
    (JSON or TOML, by its suffix) over them, then ``MODEL=RPM[:TPM]`` flags over both."""
    data: dict = {}
    if path:
        with open(path, "rb") as f:
            data = tomllib.load(f) if path.endswith(".toml") else json.load(f)
    config = RateLimitConfig.model_validate(data)
    config.models = {**(endpoint_limits or {}), **config.models}
    for flag in flags or ():
        model, sep, numbers = flag.rpartition("=")
        requests, _, tokens = numbers.partition(":")
        if not sep or not model:
            raise ValueError(f"--rate-limit {flag!r}: expected MODEL=REQUESTS_PER_MINUTE[:TOKENS_PER_MINUTE]")
        try:
            config.models[model] = ModelLimit(requests_per_minute=int(requests) if requests else None,
                                              tokens_per_minute=int(tokens) if tokens else None)
        except ValueError as exc:
            raise ValueError(f"--rate-limit {flag!r}: {exc}") from None
    return config


class _Entry:
    """One request let through: it occupies the budget until ``ended + window``."""

    __slots__ = ("ended", "tokens")

    def __init__(self, tokens: int):
        self.ended: float | None = None
        self.tokens = tokens


class ModelLimiter:
    """One model's budget, in one worker: its share, its requests, its sync with the ledger."""

    def __init__(self, model: str, limit: ModelLimit, ledger: "RateLedger", worker_id: str, window_s: float,
                 lease_s: float, stats: dict):
        self.model, self.limit, self.ledger, self.worker_id = model, limit, ledger, worker_id
        self.window_s, self.lease_s = window_s, lease_s
        self.poll_s = min(1.0, window_s / 10)
        self.margin_s = min(2.0, lease_s / 4)  # stop using a share this long before its lease ends
        self.share_r = 0  # requests and tokens this worker may occupy (as durably recorded)
        self.share_t = 0
        self.lease_until = 0.0  # epoch seconds
        self.want = False  # as recorded in the ledger
        self.entries: deque[_Entry] = deque()
        self.waiters = 0
        self.blocked_until = 0.0  # monotonic
        self.throttle, self.throttle_at = 1.0, 0.0  # factor, epoch seconds
        self._throttle_news: tuple[float, float] | None = None  # a 429's (factor, blocked_until epoch) to share
        self._changed = asyncio.Event()
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._last_active = time.monotonic()
        self._synced = False
        self._last_wait = -1e9  # monotonic time a call last had to wait
        self.stats = stats

    # ---- the budget, locally --------------------------------------------------

    def occupied(self, now: float) -> tuple[int, int]:
        while self.entries and self.entries[0].ended is not None and self.entries[0].ended + self.window_s <= now:
            self.entries.popleft()
        live = [e for e in self.entries if e.ended is None or e.ended + self.window_s > now]
        return len(live), sum(e.tokens for e in live)

    def factor(self, now_epoch: float) -> float:
        """The slow-down in force: its excess over 1 halves every window since the last 429."""
        if self.throttle <= 1.0:
            return 1.0
        return 1.0 + (self.throttle - 1.0) * 0.5 ** max(0.0, (now_epoch - self.throttle_at) / self.window_s)

    def in_force(self, now_epoch: float) -> tuple[int | None, int | None]:
        f = self.factor(now_epoch)
        r = self.limit.requests_per_minute
        t = self.limit.tokens_per_minute
        return (max(1, math.floor(r / f)) if r else None), (max(1, math.floor(t / f)) if t else None)

    def _admits(self, tokens: int) -> bool:
        now = time.monotonic()
        if now < self.blocked_until or time.time() > self.lease_until - self.margin_s:
            return False
        r, t = self.occupied(now)
        if self.limit.requests_per_minute and r + 1 > self.share_r:
            return False
        return not self.limit.tokens_per_minute or t + tokens <= self.share_t

    def _next_change_in(self) -> float:
        now = time.monotonic()
        waits = [self.poll_s, self.blocked_until - now]
        waits += [e.ended + self.window_s - now for e in self.entries if e.ended is not None][:1]
        return max(0.01, min(w for w in waits if w > 0) if any(w > 0 for w in waits) else self.poll_s)

    def _signal(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def acquire(self, tokens: int) -> Permit:
        if self.limit.tokens_per_minute:
            tokens = min(tokens, self.limit.tokens_per_minute)  # a call bigger than the limit still goes, alone
        started = time.monotonic()
        self._ensure_task()
        self.waiters += 1
        waited = False
        try:
            while not self._admits(tokens):
                waited = True
                self._kick.set()
                changed = self._changed
                try:
                    await asyncio.wait_for(changed.wait(), timeout=self._next_change_in())
                except TimeoutError:
                    pass
        finally:
            self.waiters -= 1
        entry = _Entry(tokens)
        self.entries.append(entry)
        self._last_active = time.monotonic()
        waited = time.monotonic() - started if waited else 0.0
        self.stats["waited_s"] += waited
        self.stats["requests"] += 1
        return Permit(self.model, tokens, waited_s=waited, entry=entry)

    def release(self, permit: Permit, tokens: int | None, status: int | None, retry_after: float | None) -> None:
        entry = permit.entry
        entry.ended = time.monotonic()
        if tokens:
            entry.tokens = tokens
        if status == 429:
            self.stats["throttled"] += 1
            now = time.time()
            self.throttle = min(MAX_THROTTLE, self.factor(now) * THROTTLE_STEP)
            self.throttle_at = now
            blocked = now + (retry_after or 0.0)
            if retry_after:
                self.blocked_until = max(self.blocked_until, time.monotonic() + retry_after)
            self._throttle_news = (self.throttle, blocked)
            log.warning("model %s answered 429: held back %.1f s, slow-down x%.2f", self.model, retry_after or 0,
                        self.throttle)
            self._kick.set()
        self._signal()

    # ---- the share, through the ledger ----------------------------------------

    def _ensure_task(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._sync_loop(), name=f"rate:{self.model}")

    async def _sync_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=self.poll_s)
            except TimeoutError:
                pass
            self._kick.clear()
            try:
                for _ in range(5):  # lost a compare-and-swap: read again
                    if await self.sync():
                        break
            except Exception:
                log.exception("rate limit of %s: the ledger could not be read or written", self.model)
            if self._idle():
                return  # nothing held, nothing wanted: no more reads until the next request
            await asyncio.sleep(min(0.25, self.poll_s / 2))  # waiters kick often: read at most this often

    def _idle(self) -> bool:
        return (not self.waiters and time.monotonic() - self._last_wait >= 2 * self.poll_s and not self.share_r and not self.share_t and not self.want
                and self._throttle_news is None)

    async def sync(self) -> bool:
        """Read the model's row and write this worker's share if it must change;
        False when another worker changed the row first."""
        row = await asyncio.to_thread(self.ledger.current, self.model)
        if row is None:
            await asyncio.to_thread(self.ledger.create, self.model)
            return False
        now_e, now_m = time.time(), time.monotonic()
        self._adopt_throttle(row, now_e, now_m)
        shares = dict(row.get("shares")) if isinstance(row.get("shares"), dict) else {}
        if not self._synced and self.worker_id in shares:
            # This worker's share from before a restart: its requests may still be in the
            # window, so it drains like a dead worker's (under another name) instead of vanishing.
            previous = shares.pop(self.worker_id)
            shares[f"{self.worker_id}~{int(previous.get('until', 0))}"] = {**previous, "want": False}
        self._synced = True
        others = {w: s for w, s in shares.items() if w != self.worker_id and s.get("until", 0) + self.window_s > now_e}
        wanting = sorted([w for w, s in others.items() if s.get("want") and s.get("until", 0) > now_e]
                         + ([self.worker_id] if self.waiters or now_m - self._last_wait < 2 * self.poll_s else []))
        occ_r, occ_t = self.occupied(now_m)
        limit_r, limit_t = self.in_force(now_e)
        idle = not self.waiters and now_m - self._last_active > self.lease_s
        # Wanting is said until a moment (two polls) after the last wait, so that a
        # busy worker does not write "want" and "no longer" around every burst.
        wants = bool(self.waiters) or now_m - self._last_wait < 2 * self.poll_s
        me = self.worker_id if wants else None
        new_r = self._target(self.limit.requests_per_minute and limit_r, self.share_r, occ_r,
                             sum(s.get("r", 0) for s in others.values()), wanting, me, idle)
        new_t = self._target(self.limit.tokens_per_minute and limit_t, self.share_t, occ_t,
                             sum(s.get("t", 0) for s in others.values()), wanting, me, idle)
        want = wants
        renew = (new_r or new_t or want) and self.lease_until - now_e < self.lease_s / 2
        news = self._throttle_news
        if (new_r, new_t, want) == (self.share_r, self.share_t, self.want) and not renew and news is None:
            return True
        mine = {"r": new_r, "t": new_t, "until": now_e + self.lease_s, "want": want}
        values = {"shares": {**{w: s for w, s in others.items()}, **({self.worker_id: mine}
                                                                      if new_r or new_t or want else {})}}
        if news is not None:
            values.update(throttle=news[0], throttle_at=now_e,
                          blocked_until=max(news[1], row.get("blocked_until") or 0.0))
        old = (self.share_r, self.share_t)
        self.share_r, self.share_t = min(new_r, old[0]), min(new_t, old[1])  # never use more while it is unsure
        if not await asyncio.to_thread(self.ledger.swap, row, values):
            self.share_r, self.share_t = old
            return False
        self.stats["ledger_writes"] += 1
        log.debug("rate limit of %s: share %d req / %d tok (was %d / %d), want %s, lease to %.1f, others %s",
                  self.model, new_r, new_t, old[0], old[1], want, mine["until"], others)
        self.share_r, self.share_t, self.want, self.lease_until = new_r, new_t, want, mine["until"]
        if news is self._throttle_news:
            self._throttle_news = None
        self._signal()
        return True

    @staticmethod
    def _target(limit: int | None, current: int, occupied: int, others: int, wanting: list, me: str | None,
                idle: bool) -> int:
        """This worker's share of one budget: a fair split among the workers who want
        more (``wanting``, sorted, includes this one, ``me``, when it wants), all that is free if it
        alone wants; when others want, no more than a fair split would give it; nothing once idle;
        never below what it occupies, never above what the others leave."""
        if not limit:
            return 0
        free = max(0, limit - others)
        if me is not None:
            desired = limit // len(wanting) + (1 if wanting.index(me) < limit % len(wanting) else 0) \
                if len(wanting) > 1 else limit
        elif idle:
            desired = 0
        elif wanting:  # others want: keep up to what a fair split would give this one, free the rest
            desired = min(current, limit // (len(wanting) + 1))
        else:
            desired = current
        return max(min(desired, free), min(occupied, current))

    def _adopt_throttle(self, row: dict, now_e: float, now_m: float) -> None:
        """A 429 another worker saw holds this one back too."""
        blocked = row.get("blocked_until") or 0.0
        if blocked > now_e:
            self.blocked_until = max(self.blocked_until, now_m + (blocked - now_e))
        if (row.get("throttle_at") or 0.0) > self.throttle_at:
            self.throttle, self.throttle_at = row.get("throttle") or 1.0, row["throttle_at"]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class RateLimiter:
    """The gate agents.py installs: configured models through their ModelLimiter,
    the others straight through (honouring a 429's Retry-After locally)."""

    def __init__(self, config: RateLimitConfig, ledger: "RateLedger", worker_id: str):
        self.config = config
        lease_s = config.lease_s or max(5.0, config.window_s / 2)
        self.stats: dict[str, dict] = {}
        self.models = {}
        for model, limit in config.models.items():
            self.stats[model] = {"requests": 0, "waited_s": 0.0, "throttled": 0, "ledger_writes": 0}
            self.models[model] = ModelLimiter(model, limit, ledger, worker_id, config.window_s, lease_s,
                                              self.stats[model])
        self.other = OpenGate()
        self.other_stats = {"requests": 0, "waited_s": 0.0, "throttled": 0, "ledger_writes": 0}

    async def acquire(self, model: str, tokens: int) -> Permit:
        limiter = self.models.get(model)
        if limiter is not None:
            return await limiter.acquire(tokens)
        permit = await self.other.acquire(model, tokens)
        self.other_stats["requests"] += 1
        self.other_stats["waited_s"] += permit.waited_s
        return permit

    def release(self, permit: Permit, *, tokens: int | None = None, status: int | None = None,
                retry_after: float | None = None) -> None:
        limiter = self.models.get(permit.model)
        if limiter is not None:
            limiter.release(permit, tokens, status, retry_after)
            return
        if status == 429:
            self.other_stats["throttled"] += 1
        self.other.release(permit, tokens=tokens, status=status, retry_after=retry_after)

    def account(self, model: str, tokens: int) -> None:
        """A call that was made without a permit, counted now (it ended now)."""
        limiter = self.models.get(model)
        if limiter is None:
            return
        entry = _Entry(tokens)
        entry.ended = time.monotonic()
        limiter.entries.append(entry)
        limiter.stats["requests"] += 1
        limiter._signal()

    def snapshot(self) -> dict[str, dict]:
        """Per model: counters, the share held and the slow-down in force (for metrics)."""
        out = {}
        now = time.time()
        for model, limiter in self.models.items():
            occ_r, occ_t = limiter.occupied(time.monotonic())
            out[model] = {**self.stats[model], "share_requests": limiter.share_r, "share_tokens": limiter.share_t,
                          "occupied_requests": occ_r, "waiting": limiter.waiters, "throttle": limiter.factor(now)}
        out["(unconfigured)"] = dict(self.other_stats)
        return out

    async def close(self) -> None:
        for limiter in self.models.values():
            await limiter.close()
