"""A Python client of the agentsvc HTTP API, sync and async (httpx).

    from client import Client

    with Client("http://127.0.0.1:8765", token="...") as api:
        made = api.create_agent("countdown", "count", config={"n": 3})
        api.wait_action(made.action_id)
        for event in api.stream(session_id=made.session_id):
            print(event.event, event.data)

- calls.py: every route as a request (path, body, answer model), and
  methods.py: every method, both shared by sync.py (:class:`Client`) and
  aio.py (:class:`AsyncClient`), which differ only in how they send, page,
  poll and stream;
- _http.py: retries (with an Idempotency-Key for what queues actions) and paging;
- errors.py: the service's error answers as exceptions, and :class:`Unreachable`;
- models.py: typed requests, answers and stream events, checked against the
  service's OpenAPI document by the tests;
- stream.py: following ``GET /api/stream`` across disconnects and restarts.

It imports nothing of the service (pyproject.toml's import contracts say so),
so a program that drives agentsvc needs only this package, httpx and pydantic.
"""
from client import models
from client.aio import AsyncClient
from client.errors import (ApiError, BadRequest, ClientError, Conflict, Forbidden, NotFound, RateLimited, ServerError,
                           Unauthorized, Unprocessable, Unreachable, WaitTimeout)
from client.sync import Client

__all__ = ["Client", "AsyncClient", "models", "ClientError", "ApiError", "BadRequest", "Unauthorized", "Forbidden",
           "NotFound", "Conflict", "Unprocessable", "RateLimited", "ServerError", "Unreachable", "WaitTimeout"]
