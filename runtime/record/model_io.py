"""Keeping what a model was sent and answered for a session's last steps
("what the model saw", store/model_io.py).

A moniker that calls a model reports each call with
``StepContext.record_model_io`` (monikers/frame.py); after the step is
recorded, the session hands those calls here.  They are written only when
the worker keeps any (``--keep-model-io N``, N > 0) and the session is not
private (its config's ``private``), with secrets taken out first: values of
secret-named keys, and credentials written in the prompt's text
(domain/redact.py), since a prompt carries the agent's state and inputs,
which may hold what a tool or a user put there.  No header is ever kept (the
endpoint's key travels in one).

A session keeps the calls of its last N steps: every N/2 steps (at least
every step) the older ones are deleted, so a session holds at most about
1.5 N steps' worth, one delete per N/2 steps.
"""
from __future__ import annotations

import asyncio
import logging

from domain.redact import redact, redact_text

log = logging.getLogger("runtime.model_io")


def _redacted_request(request: dict | None) -> dict | None:
    """The body with secret-named keys and credentials in its messages' text redacted."""
    if not isinstance(request, dict):
        return None
    request = redact(request)
    messages = []
    for message in request.get("messages") or []:
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str):
                message = {**message, "content": redact_text(content)}
            elif isinstance(content, list):
                message = {**message, "content": [
                    {**part, "text": redact_text(part["text"])} if isinstance(part, dict)
                    and isinstance(part.get("text"), str) else part for part in content]}
        messages.append(message)
    return {**request, "messages": messages} if "messages" in request else request


def rows_of(calls: list[dict], *, agent_id: str, session_id: str, iteration: int) -> list[dict]:
    """The model_io rows of one step's reported calls."""
    return [{"agent_id": agent_id, "session_id": session_id, "iteration": iteration,
             "ask": int(call.get("ask") or 0), "function": call.get("function"), "model": call.get("model"),
             "mode": call.get("mode"), "request": _redacted_request(call.get("request")),
             "reply": redact_text(call["reply"]) if isinstance(call.get("reply"), str) else None,
             "tokens": call.get("tokens")} for call in calls]


class ModelIOKeeper:
    """Writes the calls of each step of the sessions that keep them; prunes older steps."""

    def __init__(self, store, keep_steps: int):
        self.store = store
        self.keep_steps = max(0, int(keep_steps))
        self.prune_every = max(1, self.keep_steps // 2)

    def keeps(self, config) -> bool:
        return self.keep_steps > 0 and not getattr(config, "private", False)

    async def keep(self, calls: list[dict], *, agent_id: str, session_id: str, iteration: int) -> None:
        """Record one step's calls, after its step row (a failure here is logged:
        the step stands, only this view of it is missing)."""
        if not calls:
            return
        rows = rows_of(calls, agent_id=agent_id, session_id=session_id, iteration=iteration)
        try:
            await asyncio.to_thread(self.store.model_io.append, rows)
            if iteration % self.prune_every == 0 and iteration >= self.keep_steps:
                await asyncio.to_thread(self.store.model_io.prune, session_id, iteration - self.keep_steps + 1)
        except Exception as exc:  # noqa: BLE001 - the step is recorded; this is its extra view
            log.warning("model calls of step %s not kept: %s: %s session=%s agent=%s", iteration,
                        type(exc).__name__, exc, session_id, agent_id)
