"""Replaying a recorded session (``POST /api/sessions/<id>/replay``).

A replay is a new session of the same agent that re-runs a recorded session's
steps, from step ``from_iteration`` on, under another model, prompt, profile
or moniker.  It is a *create* action whose payload carries
``replay: {session_id, from_iteration, to_iteration?, tools, children}``, so it
goes through the queue and resumes after a crash like any session.

What makes it a replay and not a fork is that the world is played back from
the record instead of being asked again:

- **Numbering.**  The replay's steps keep the recording's iteration numbers:
  it starts from the state the source had *before* step ``from_iteration``
  (the state after step ``from_iteration - 1``, or a fresh state for 0), so
  its first step is ``from_iteration`` and a diff pairs steps by iteration.
- **Tool calls** (``tools: "recorded"``, the default): a call whose name and
  arguments equal the recorded call at the same place (same iteration, same
  ``seq``) gets the recorded outcome without running: its row ends
  ``replayed``, with ``replay_of`` (the recorded call's id) and
  ``replayed_status``.  Any other call is a *divergence*: its row ends
  ``failed`` ("diverged from the recording: ..."), so do the step's calls
  after it (not served, not run), and the replay stops there (status
  ``stopped``, reason ``diverged``).  No tool ever runs in this mode.
  With ``recorded_then_live`` a divergence runs the call live instead (if the
  session's config allows the tool) and every later call runs live too;
  ``live`` runs every call live.
- **What arrived from outside** (guidance, conversation messages, a user's
  answers, a sub-agent's results, a parent's context) is delivered at the
  iteration where the recording consumed it, with the same action ids, so a
  redelivery after a crash is refused like any other.  A sub-agent spawned
  in the recording is not spawned again: its ``spawn_agent`` call is served
  from the record, and its result arrives when it arrived then.
- **Woken after done.**  A recording that ran on after a ``done`` step (its
  session was woken by a sub-agent's result, or reactivated by a follow-up)
  is replayed on too: when the replay is done where the recording has a next
  step, what that step consumed from outside is queued and the replay is
  woken as its recording was (:meth:`Replayer.wake`), before its end is
  saved, so a crash cannot leave it ended where its recording went on.
- **to_iteration**: the replay stops (reason ``replay_end``) once that step is done.

The divergence is also kept on the snapshot (``replay.diverged_at`` and
``replay.divergence``), and it is found again from the tool rows after a
crash, so a replay never carries on past a divergence it had already met.
"""
from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from domain.statuses import TOOL_CALL_ENDED
from runtime.session.child_sessions import next_generation, wakeable
from store.filters import InvalidId, check_id

if TYPE_CHECKING:
    from runtime.base.persistence import Persistence
    from runtime.session.view import AgentView

log = logging.getLogger("runtime.replay")

TOOL_MODES = ("recorded", "live", "recorded_then_live")
CHILD_MODES = ("served",)
DIVERGED = "diverged from the recording: "
# Inbox kinds that came from outside the session; the replay's own observers
# and runner make the others (notes, interrupted-step reports) again themselves.
OUTSIDE_KINDS = frozenset({"guidance", "message", "answer", "child_result", "parent_context"})


class ReplayError(ValueError):
    """The replay cannot be made (unknown step, bad payload); the action fails with this."""


async def replay_snapshot(persist: Persistence, replay: dict, base: dict) -> dict:
    """The first snapshot of a replay: ``base`` (a create's) placed just before
    step ``from_iteration`` of the source, with ``replayed_from`` and ``replay``."""
    spec = _checked(replay)
    source, start = spec["session_id"], spec["from_iteration"]
    snapshot = {**base, "iteration": start - 1, "state": {}, "pending_guidance": [], "replay": spec,
                "replayed_from": {"session_id": source, "from_iteration": start}}
    if start == 0:
        return snapshot
    before = await _step_before(persist, source, start)
    if before is None:
        raise ReplayError(f"session {source} has no step {start - 1} to start step {start} from")
    return {**snapshot, "step_token": before.get("step_token"),
            "next_step_token": before.get("next_step_token") or base.get("next_step_token"),
            "state": before.get("state") if isinstance(before.get("state"), dict) else {}}


def _checked(replay) -> dict:
    if not isinstance(replay, dict):
        raise ReplayError("replay must be an object")
    try:
        source = check_id(replay.get("session_id"), "replay.session_id")
    except InvalidId as exc:
        raise ReplayError(str(exc)) from None
    start, end = replay.get("from_iteration", 0), replay.get("to_iteration")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ReplayError("replay.from_iteration must be a non-negative integer")
    if end is not None and (isinstance(end, bool) or not isinstance(end, int) or end < start):
        raise ReplayError("replay.to_iteration must be an integer no less than from_iteration")
    tools, children = replay.get("tools", "recorded"), replay.get("children", "served")
    if tools not in TOOL_MODES:
        raise ReplayError(f"replay.tools must be one of {', '.join(TOOL_MODES)}")
    if children not in CHILD_MODES:
        raise ReplayError(f"replay.children must be one of {', '.join(CHILD_MODES)}")
    return {"session_id": source, "from_iteration": start, "to_iteration": end, "tools": tools,
            "children": children, "diverged_at": replay.get("diverged_at"), "divergence": replay.get("divergence")}


async def _step_before(persist: Persistence, session_id: str, iteration: int, depth: int = 0) -> dict | None:
    """Step ``iteration - 1`` of a session, looked for along its lineage: a
    fork's or replay's earlier steps are in the session it came from."""
    step = await persist.step_at(session_id, iteration - 1)
    if step is not None or depth > 16:
        return step
    snapshot = await persist.load_snapshot(session_id) or {}
    origin = snapshot.get("replayed_from") or snapshot.get("forked_from") or {}
    if origin.get("session_id"):
        return await _step_before(persist, origin["session_id"], iteration, depth + 1)
    return None


class Replayer:
    """One replay session's view of its recording: what to deliver before
    each step, and which outcome each tool call gets."""

    def __init__(self, persist: Persistence, spec: dict):
        self.persist = persist
        self.spec = dict(spec)
        self.source: str = spec["session_id"]
        self.tools: str = spec.get("tools") or "recorded"
        self.to_iteration: int | None = spec.get("to_iteration")

    @classmethod
    def of(cls, persist: Persistence, snapshot: dict) -> Replayer | None:
        spec = snapshot.get("replay")
        return cls(persist, spec) if isinstance(spec, dict) and spec.get("session_id") else None

    @property
    def diverged(self) -> bool:
        return self.spec.get("diverged_at") is not None

    # ---- before each step -------------------------------------------------

    async def before_step(self, agent: AgentView) -> bool:
        """Stop the replay at a divergence (``recorded``) or past
        ``to_iteration``; otherwise queue what the recording's step of this
        iteration consumed from outside.  True when no step may run."""
        if self.diverged and self.tools == "recorded":
            agent.last_error = f"{DIVERGED}{self.spec.get('divergence')}"
            await agent.set_status("stopped", "diverged")
            return True
        iteration = agent.iteration + 1
        if self.to_iteration is not None and iteration > self.to_iteration:
            await agent.set_status("stopped", "replay_end")
            return True
        recorded = await self.persist.step_at(self.source, iteration)
        if recorded is not None and self._deliver(agent, recorded.get("guidance") or []):
            await agent.save()  # queued durably, like any inbox item, before the step consumes it
        return False

    async def wake(self, agent: AgentView) -> bool:
        """The replay has finished ``done``: when its recording ran on (it was
        woken by what its next step consumed: a child's result, a follow-up),
        queue those items and run again, as the recording did.  True when woken.
        A worker shutting down still wakes it (saved ``running``, its restart
        runs it on): ended ``done`` instead, it was never adopted again and
        stayed one step short of its recording (the kill loop, two workers:
        a supervisor's kill stops its workers gracefully)."""
        if (agent.stop_requested and not agent.stopping_for_restart) or not wakeable(agent.status,
                                                                                      agent.status_reason):
            return False
        iteration = agent.iteration + 1
        if (self.to_iteration is not None and iteration > self.to_iteration) or (
                self.diverged and self.tools == "recorded"):
            return False
        recorded = await self.persist.step_at(self.source, iteration)
        if recorded is None:
            return False
        self._deliver(agent, recorded.get("guidance") or [])
        if not any((g.get("kind") or "guidance") in OUTSIDE_KINDS for g in agent.pending_guidance):
            return False  # the recording was not woken from outside there: nothing to run again for
        next_generation(agent)
        await agent.set_status("running", "woken")  # queued durably with the status, as the recording's wake
        log.info("replay %s woken at step %d, as its recording %s was", agent.session_id, iteration, self.source)
        return True

    @staticmethod
    def _deliver(agent: AgentView, items: list) -> bool:
        fresh = [dict(item) for item in items if isinstance(item, dict)
                 and (item.get("kind") or "guidance") in OUTSIDE_KINDS and not agent.holds(item.get("action_id"))]
        agent.pending_guidance.extend(fresh)
        return bool(fresh)

    # ---- tool calls ---------------------------------------------------------

    async def serve_calls(self, agent: AgentView, iteration: int, rows: list[dict],
                          planned: list[dict]) -> list[dict]:
        """``rows`` (a step's, in call order) with the ``planned`` ones (not yet
        written) given their recorded outcome, or marked as diverging.  Rows read
        back after a crash are taken as they are, and a divergence among them is
        noted again.  In ``recorded`` mode no planned row is left to run: once a
        call has diverged, every later one of the step ends ``failed`` too."""
        fresh = {row["id"] for row in planned}
        recorded = {}
        if self.tools != "live" and fresh:
            recorded = {r["seq"]: r for r in await self.persist.tool_calls_of_step(self.source, iteration)}
        for row in rows:  # a divergence read back is noted first: the calls after it are not served
            if row["id"] not in fresh and (row.get("error") or "").startswith(DIVERGED) and not self.diverged:
                self._note_divergence(agent, row["iteration"], row["error"][len(DIVERGED):])
        served = []
        for row in rows:
            if row["id"] in fresh and self.tools != "live":
                if not self.diverged:
                    row = self._serve(agent, row, recorded.get(row["seq"]))
                elif self.tools == "recorded":
                    row = self._not_run(row)
            served.append(row)
        return served

    def _not_run(self, row: dict) -> dict:
        """A call after the divergence, in ``recorded`` mode: it never runs."""
        log.info("tool call %s %s not run: the replay diverged earlier session=%s", row["id"], row["name"],
                 row["session_id"])
        return dict(row, status="failed", finished_at=row["created_at"],
                    error=f"{DIVERGED}the replay stopped at an earlier divergence "
                          f"(step {self.spec.get('diverged_at')}: {self.spec.get('divergence')}); "
                          "this call was not run")

    def _serve(self, agent: AgentView, row: dict, recorded: dict | None) -> dict:
        mismatch = _mismatch(row, recorded)
        if mismatch is None:
            log.info("tool call %s %s replayed from %s session=%s iteration=%d", row["id"], row["name"],
                     recorded["id"], row["session_id"], row["iteration"])
            status = recorded.get("replayed_status") if recorded["status"] == "replayed" else recorded["status"]
            edited = {"args": recorded.get("args"), "original_args": recorded["original_args"]} \
                if recorded.get("original_args") is not None else {}  # the model sees what the recording's did
            return dict(row, status="replayed", replay_of=recorded["id"], replayed_status=status,
                        result=recorded.get("result"), error=recorded.get("error"), finished_at=row["created_at"],
                        **edited)
        self._note_divergence(agent, row["iteration"], mismatch)
        if self.tools == "recorded_then_live":
            log.info("tool call %s %s diverged (%s); running live session=%s", row["id"], row["name"], mismatch,
                     row["session_id"])
            return row
        log.info("tool call %s %s diverged (%s); the replay stops session=%s", row["id"], row["name"], mismatch,
                 row["session_id"])
        return dict(row, status="failed", error=f"{DIVERGED}{mismatch}", finished_at=row["created_at"])

    def _note_divergence(self, agent: AgentView, iteration: int, what: str) -> None:
        self.spec.update(diverged_at=iteration, divergence=what)
        agent.extra["replay"] = dict(self.spec)


def _mismatch(row: dict, recorded: dict | None) -> str | None:
    """Why a call does not match the recorded one at its place, or None."""
    where = f"call {row['seq'] + 1} of step {row['iteration']}"
    if recorded is None:
        return f"{where} is {row['name']}({_args(row['args'])}); the recording made no such call"
    # A call a person edited before approving is matched by what the model asked
    # (original_args); its recorded outcome, of the approved args, is served.
    asked = recorded.get("original_args") if recorded.get("original_args") is not None else recorded.get("args")
    if recorded["name"] != row["name"] or _canonical(asked) != _canonical(row.get("args")):
        return (f"{where} is {row['name']}({_args(row['args'])}); "
                f"the recording called {recorded['name']}({_args(asked)})")
    if recorded["status"] not in TOOL_CALL_ENDED:
        return f"{where}: the recorded call has no outcome (it is {recorded['status']})"
    return None


def _canonical(args) -> str:
    return json.dumps(args if args is not None else {}, sort_keys=True, separators=(",", ":"), default=str)


def _args(args, limit: int = 200) -> str:
    text = _canonical(args)
    return text if len(text) <= limit else text[:limit] + "…"
