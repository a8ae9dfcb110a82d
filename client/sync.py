"""The synchronous client (httpx.Client).  Its methods are methods.py's, written
once for both clients; here is how it sends a call (with the retry rule of
_http.py), reads pages, polls with backoff and follows the stream."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from client import errors, models as m
from client._http import RETRIES, Call, Pager, answer, backoff, default_url, headers, should_retry, unreachable
from client.methods import FINISHED_ACTIONS, Methods  # noqa: F401 - FINISHED_ACTIONS: where it was
from client.stream import CLOSE, Decoder, Follower


class Client(Methods):
    """The service at ``url`` (default AGENTSVC_URL, else http://127.0.0.1:8765),
    with a bearer ``token`` when it has tokens.  Use it as a context manager, or close() it."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retries: int = RETRIES, transport: httpx.BaseTransport | None = None):
        self.url = (url or default_url()).rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.http = httpx.Client(base_url=self.url, headers=headers(token), timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- plumbing -------------------------------------------------------------------

    def send(self, call: Call):
        """One logical call: its answer (as its model), or the error it ended with
        after the tries it may have (_http.py)."""
        attempt = 0
        while True:
            try:
                response = self.http.request(call.method, call.path, **call.kwargs())
            except httpx.TransportError as exc:
                failure: errors.ClientError = unreachable(self.url, exc, self.timeout)
            else:
                try:
                    return answer(call, response)
                except errors.ApiError as exc:
                    failure = exc
            if not should_retry(call, failure, attempt, self.retries):
                raise failure
            time.sleep(backoff(attempt, failure))
            attempt += 1

    def request(self, method: str, path: str, *, params: dict | None = None, json: Any = None,
                idempotent: bool = False) -> Any:
        """Any route, for what has no method here: the answer's JSON."""
        return self.send(Call(method, path, params or {}, json, idempotent=idempotent))

    def _pages(self, pager: Pager) -> Iterator[Any]:
        seen: set = set()
        offset, given = pager.offset, 0
        while True:
            items, count = pager.rows(self.send(pager.call(offset)), seen)
            for item in items:
                if pager.max_items is not None and given >= pager.max_items:
                    return
                given += 1
                yield item
            if count < pager.page_size:
                return
            offset += count

    # ---- what the methods (methods.py) hand over --------------------------------------

    def _then(self, call: Call, then):
        """``then`` of the call's answer (a method that reshapes it: methods.py)."""
        return then(self.send(call))

    def _poll(self, read, done, timeout: float, describe, pause: float = 0.02, most: float = 0.5):
        deadline, last = time.monotonic() + timeout, None
        while True:
            last = read()
            if done(last):
                return last
            if time.monotonic() > deadline:
                raise errors.WaitTimeout(describe(last), last)
            time.sleep(pause)
            pause = min(pause * 1.5, most)

    # ---- the event stream -------------------------------------------------------------------------

    def stream(self, session_id: str | None = None, *, agent_id: str | None = None,
               conversation_id: str | None = None, rooms: list[str] | None = None, since: str | None = None,
               tail: int | None = None, follow: bool = True, on_disconnect=None) -> Iterator[m.Event]:
        """Typed events of the rooms (stream.py says how): the recorded ones after ``since`` (a cursor:
        an event's ``cursor``), then, with ``follow``, the live ones for ever, resuming after any dropped
        connection or restart with nothing missed or repeated.  Without ``follow`` it ends when what was
        recorded has been sent.  ``on_disconnect(reason)`` hears of each reconnect."""
        follower = Follower(rooms or [], session_id, agent_id, conversation_id, since, tail, follow, on_disconnect)
        while not follower.finished:
            try:
                with self.http.stream("GET", "/api/stream", **follower.request(), timeout=follower.timeout) \
                        as response:
                    if response.status_code != 200:
                        response.read()
                        follower.refused(response)
                    else:
                        follower.connected()
                        decoder = Decoder()
                        for line in response.iter_lines():
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
                time.sleep(follower.delay())
