"""The asynchronous client (httpx.AsyncClient): the same methods as sync.py's
:class:`~client.sync.Client` (methods.py, written once), awaited; listings and
the stream are async iterators.  Here is how it sends, pages, polls and streams."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from client import errors, models as m
from client._http import RETRIES, Call, Pager, answer, backoff, default_url, headers, should_retry, unreachable
from client.methods import Methods
from client.stream import CLOSE, Decoder, Follower


class AsyncClient(Methods):
    """The service at ``url`` (default AGENTSVC_URL, else http://127.0.0.1:8765),
    with a bearer ``token`` when it has tokens.  Use it as an async context manager, or aclose() it."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retries: int = RETRIES, transport: httpx.AsyncBaseTransport | None = None):
        self.url = (url or default_url()).rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.http = httpx.AsyncClient(base_url=self.url, headers=headers(token), timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    # ---- plumbing -------------------------------------------------------------------

    async def send(self, call: Call):
        """One logical call: its answer (as its model), or the error it ended with
        after the tries it may have (_http.py)."""
        attempt = 0
        while True:
            try:
                response = await self.http.request(call.method, call.path, **call.kwargs())
            except httpx.TransportError as exc:
                failure: errors.ClientError = unreachable(self.url, exc, self.timeout)
            else:
                try:
                    return answer(call, response)
                except errors.ApiError as exc:
                    failure = exc
            if not should_retry(call, failure, attempt, self.retries):
                raise failure
            await asyncio.sleep(backoff(attempt, failure))
            attempt += 1

    async def request(self, method: str, path: str, *, params: dict | None = None, json: Any = None,
                idempotent: bool = False) -> Any:
        """Any route, for what has no method here: the answer's JSON."""
        return await self.send(Call(method, path, params or {}, json, idempotent=idempotent))

    async def _pages(self, pager: Pager) -> AsyncIterator[Any]:
        seen: set = set()
        offset, given = pager.offset, 0
        while True:
            items, count = pager.rows(await self.send(pager.call(offset)), seen)
            for item in items:
                if pager.max_items is not None and given >= pager.max_items:
                    return
                given += 1
                yield item
            if count < pager.page_size:
                return
            offset += count

    # ---- what the methods (methods.py) hand over --------------------------------------

    async def _then(self, call: Call, then):
        """``then`` of the call's answer (a method that reshapes it: methods.py)."""
        return then(await self.send(call))

    async def _poll(self, read, done, timeout: float, describe, pause: float = 0.02, most: float = 0.5):
        deadline, last = time.monotonic() + timeout, None
        while True:
            last = await read()
            if done(last):
                return last
            if time.monotonic() > deadline:
                raise errors.WaitTimeout(describe(last), last)
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, most)

    # ---- the event stream -------------------------------------------------------------------------

    async def stream(self, session_id: str | None = None, *, agent_id: str | None = None,
               conversation_id: str | None = None, rooms: list[str] | None = None, since: str | None = None,
               tail: int | None = None, follow: bool = True, on_disconnect=None) -> AsyncIterator[m.Event]:
        """Typed events of the rooms (stream.py says how): the recorded ones after ``since`` (a cursor:
        an event's ``cursor``), then, with ``follow``, the live ones for ever, resuming after any dropped
        connection or restart with nothing missed or repeated.  Without ``follow`` it ends when what was
        recorded has been sent.  ``on_disconnect(reason)`` hears of each reconnect."""
        follower = Follower(rooms or [], session_id, agent_id, conversation_id, since, tail, follow, on_disconnect)
        while not follower.finished:
            try:
                async with self.http.stream("GET", "/api/stream", **follower.request(),
                                            timeout=follower.timeout) as response:
                    if response.status_code != 200:
                        await response.aread()
                        follower.refused(response)
                    else:
                        follower.connected()
                        decoder = Decoder()
                        async for line in response.aiter_lines():
                            raw = decoder.feed(line)
                            step = None if raw is None else follower.handle(raw)
                            if step is CLOSE:
                                break
                            if step is not None:
                                yield step
                        else:
                            follower.ended()
            except httpx.TransportError as exc:
                follower.lost(exc, self.url)
            except ValueError as exc:  # a data line cut short
                follower.ended(exc)
            if not follower.finished:
                await asyncio.sleep(follower.delay())
