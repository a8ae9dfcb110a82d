"""The snapshot a forked session starts from (``POST /api/sessions/<id>/fork``).

A fork is created by a create action whose payload carries
``fork: {session_id, iteration, state?, guidance?}``.  Its first snapshot is
the original's as it stood right after step ``iteration``: that step's state
(or the edited one) and next step token, the iteration number itself (so the
fork's first own step is ``iteration + 1``: numbering continues), new guidance
queued for that first step, and ``forked_from`` naming where it came from.
The original session is only read.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from store.filters import InvalidId, check_id

if TYPE_CHECKING:
    from runtime.base.persistence import Persistence


class ForkError(ValueError):
    """The fork cannot be made (unknown step, bad payload); the action fails with this."""


async def fork_snapshot(persist: Persistence, action: dict, fork: dict, base: dict) -> dict:
    if not isinstance(fork, dict):
        raise ForkError("fork must be an object")
    try:
        source_id = check_id(fork.get("session_id"), "fork.session_id")
    except InvalidId as exc:
        raise ForkError(str(exc)) from None
    iteration = fork.get("iteration")
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise ForkError("fork.iteration must be a non-negative integer")
    step = await persist.step_at(source_id, iteration)
    if step is None:
        raise ForkError(f"session {source_id} has no step {iteration}")
    state = fork["state"] if isinstance(fork.get("state"), dict) else (step.get("state") or {})
    guidance = fork.get("guidance")
    pending = []
    if isinstance(guidance, str) and guidance.strip():
        pending.append({"action_id": action["id"], "text": guidance,
                        "source": {"kind": "fork", "session_id": source_id, "iteration": iteration}})
    return {**base, "iteration": iteration, "step_token": step.get("step_token"),
            "next_step_token": step.get("next_step_token") or base.get("next_step_token"),
            "state": state if isinstance(state, dict) else {}, "pending_guidance": pending,
            "forked_from": {"session_id": source_id, "iteration": iteration}}
